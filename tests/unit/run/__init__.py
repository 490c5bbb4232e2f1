"""Tests of shard_pipeline/run/."""
