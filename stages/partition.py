#!/usr/bin/env python3
"""Partition task: stream input shards, hash and split every document, spill sorted bucket sections."""
import _common

if __name__ == "__main__":
    from shard_pipeline.stages.partition import run_partition

    _common.main("partition", lambda run, task: f"{run_partition(run, task).rows} rows")
