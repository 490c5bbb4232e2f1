"""Tests of shard_pipeline/stages/."""
