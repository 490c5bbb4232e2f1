"""Tests of shard_pipeline/submit/."""
