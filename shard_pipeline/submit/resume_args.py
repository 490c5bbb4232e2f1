"""What `--resume RUNDIR` may change: the resources of the resubmitted tasks, never the content.

After OUT_OF_MEMORY or TIMEOUT the first thing a user does is resume with more memory or
time; those apply to the tasks queued again and are recorded in run.json. An option that
would change the output (or the run's fixed layout) is refused, named.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import replace
from typing import Any, Sequence

from shard_pipeline.errors import UsageError
from shard_pipeline.run.group import group_size
from shard_pipeline.run.runconfig import RunConfig, StageResources
from shard_pipeline.units import scale_mem

# Options a resume applies (dest names) and the ones it just uses (how to run, not what).
APPLIED = ("mem", "time", "worker_partition", "account", "max_tasks")
NEUTRAL = ("resume", "executor", "jobs", "conf", "preset", "dry_run")
_MEM = re.compile(r"\d+[KMGT]?", re.I)
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """The options present on the command line (dest -> value), defaults left out."""
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return vars(parser.parse_args(list(argv)))


def check_resume_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """Refuse every option a resume cannot honour, named; return the resource overrides given."""
    given = given_options(parser, argv)
    refused = sorted(d for d in given if d not in APPLIED + NEUTRAL)
    if refused:
        flags = {a.dest: a.option_strings[0] if a.option_strings else a.dest for a in parser._actions}
        names = ", ".join(flags.get(d, d) for d in refused)
        raise UsageError(f"--resume continues a run exactly as it was made: {names} cannot change on resume "
                         "(they decide the content or the run's layout); start a new run for that. "
                         "A resume may change --mem, --time, --partition, --account and --max-tasks")
    overrides = {d: given[d] for d in APPLIED if d in given}
    if "mem" in overrides and not _MEM.fullmatch(str(overrides["mem"])):
        raise UsageError(f"--mem {overrides['mem']!r}: expected e.g. 16G or 4000 (megabytes, as Slurm reads it)")
    if "time" in overrides and not _TIME.fullmatch(str(overrides["time"])):
        raise UsageError(f"--time {overrides['time']!r}: expected e.g. 12:00:00 or 1-00:00:00")
    if "max_tasks" in overrides and int(overrides["max_tasks"]) < 1:
        raise UsageError("--max-tasks must be at least 1")
    return overrides


def with_resources(cfg: RunConfig, resources: dict[str, Any]) -> RunConfig:
    """The run's config with --mem/--time of a resume applied to every stage (execution only: never hashed).

    --mem is one unit's memory, as at submission: an array task running C units asks for C of them.
    """
    ex = cfg.execution

    def applied(stage: str, r: StageResources) -> StageResources:
        mem = scale_mem(str(resources["mem"]), group_size(ex, stage)) if "mem" in resources else r.mem
        return StageResources(mem, str(resources.get("time", r.time)), r.cpus)

    return RunConfig(cfg.content, replace(ex, resources={s: applied(s, r) for s, r in ex.resources.items()}))
