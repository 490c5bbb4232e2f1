"""Tests of shard_pipeline/input/."""
