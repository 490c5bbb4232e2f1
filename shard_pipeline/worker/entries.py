"""The function each stage's task runs, named once: the registry says what a stage is, this says where its code is."""
from __future__ import annotations

from typing import Any, Callable


def stage_main(name: str) -> Callable[..., Any]:
    """The function that runs a task of stage `name` (RunDir, and the task for an array stage).

    Imported here, in the task that runs it, never before: a task pays for its own stage's imports
    only. Plain imports, so the layer test sees that this package calls the stages.
    """
    if name == "partition":
        from shard_pipeline.stages.partition import run_partition as main
    elif name == "plan":
        from shard_pipeline.stages.plan import run_plan as main
    elif name == "write":
        from shard_pipeline.stages.write import run_write as main
    elif name == "finalize":
        from shard_pipeline.stages.finalize import run_finalize as main
    else:
        raise ValueError(f"no stage {name!r}")
    return main
