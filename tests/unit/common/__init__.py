"""Tests of shard_pipeline's top-level modules (files, units, commands, native, access)."""
