"""Tests of shard_pipeline/contract/."""
