"""Tests of shard_pipeline/worker/."""
