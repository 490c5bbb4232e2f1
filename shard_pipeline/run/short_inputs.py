"""A run's inputs against the counts index as it is now, at its resume and by its plan: the decision is
input/index_check.py's; this reads the run's config, receipts and index, and names the run's way on.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from shard_pipeline.commands import resume_command
from shard_pipeline.input.counts_index import RELEASE_CHANGED, IndexRows, read_index
from shard_pipeline.input.index_check import Shortfall, fetch_again, refuse_shortfalls
from shard_pipeline.run.next_step import new_run_command
from shard_pipeline.run.receipts import PartitionReceipt
from shard_pipeline.run.records import made_here, read_record
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir


def run_step(root: Path, n: int) -> str:
    """The way on when a run's resume or plan is refused: a refetched input is a changed input, so a new run."""
    them = "it" if n == 1 else "them"
    fresh = new_run_command(RunDir(root), "refetched")
    again = f"{fetch_again(n)}, then start a new run" + (f": {fresh}" if fresh else "")
    return (f"{again}; if the release really changed {them}: {resume_command(root, RELEASE_CHANGED)} "
            "(finalize then replaces the index's rows with this run's counts)")


def run_index(cfg: RunConfig) -> IndexRows | None:
    """The counts index of a run's language as it is now; None when off or unreadable (said)."""
    root = cfg.execution.counts_index
    if not root:
        return None
    try:
        return read_index(Path(root), *cfg.index_key(), cfg.content.lang)
    except (OSError, ValueError) as exc:
        print(f"warning: the counts index of {cfg.content.lang} under {root} cannot be read ({exc}): "
              "the inputs are not compared with it", file=sys.stderr, flush=True)
        return None


def refuse_short_inputs(cfg: RunConfig, root: Path, docs_read: dict[str, int], accept: bool) -> list[Shortfall]:
    """A run's inputs (and the documents read so far) against the index as it is now, at its resume and plan."""
    return refuse_shortfalls(run_index(cfg), cfg.content.inputs, docs_read, accept, lambda n: run_step(root, n))


def documents_read(cfg: RunConfig, receipts: Sequence[PartitionReceipt]) -> dict[str, int]:
    """Documents (lines) read per input name, from partition receipts."""
    return {cfg.content.inputs[inp.index].name: inp.read for rc in receipts for inp in rc.inputs}


def read_so_far(run: RunDir, cfg: RunConfig) -> dict[str, int]:
    """`documents_read` of a run's partition tasks that finished (their receipts this run's): what a resume compares."""
    made = made_here(cfg.content.sha256())
    got = [read_record(run.partition_receipt(t), PartitionReceipt, made) for t in range(cfg.execution.partition_tasks)]
    return documents_read(cfg, [r for r in got if isinstance(r, PartitionReceipt)])
