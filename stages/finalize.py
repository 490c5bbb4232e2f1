#!/usr/bin/env python3
"""Finalize job: check receipts against plan and disk, write _MANIFEST.json, swap OUT into place."""
import _common

if __name__ == "__main__":
    from shard_pipeline.stages.finalize import run_finalize

    _common.main("finalize", lambda run, task: f"{run_finalize(run)['rows']} rows in place", array=False)
