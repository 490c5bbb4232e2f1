#!/usr/bin/env python3
"""Plan job: fix the global order and the row range of every output shard."""
import _common

if __name__ == "__main__":
    from shard_pipeline.stages.plan import run_plan

    _common.main("plan", lambda run, task: f"{run_plan(run)['rows']} rows", array=False)
