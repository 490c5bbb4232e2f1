#!/usr/bin/env python3
"""Write task: write the shards of one row range into OUT.tmp, with a receipt."""
import _common

if __name__ == "__main__":
    from shard_pipeline.stages.write import run_write

    _common.main("write", lambda run, task: f"{len(run_write(run, task)['shards'])} shards")
