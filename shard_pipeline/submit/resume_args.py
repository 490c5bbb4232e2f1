"""What `--resume RUNDIR` may change: the resources of the resubmitted tasks (--mem, --time, C, ...), kept in
run.json for later resumes; never the content: an option that would change it is refused, named."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.errors import UsageError
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit.args import command_line
from shard_pipeline.submit.settings import check_setting
from shard_pipeline.run.run_json import read_run_json

# Options a resume applies (dest -> the conf key whose rules they follow) and the ones it just
# uses (how to run, not what).
APPLIED = {"mem": "WORKER_MEM", "time": "TIME_LIMIT", "worker_partition": "WORKER_PARTITION", "account": "ACCOUNT",
           "max_tasks": "MAX_TASKS", "cpus_per_task": "CPUS_PER_TASK"}
NEUTRAL = ("resume", "executor", "jobs", "conf", "preset", "dry_run")
ACCEPTS = ("release_changed",)  # the explicit word a refusal asked for (input/index_check.py), kept in config.json


def given_options(argv: Sequence[str], quiet: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """The options present on the command line (dest -> value; defaults left out), and every option's flag.

    `quiet`: a command line that does not parse raises ValueError, printing nothing."""
    parser, flags = command_line(given_only=True, quiet=quiet)
    return vars(parser.parse_args(list(argv))), flags


def made_with(recorded_argv: Sequence[str] | None) -> dict[str, Any]:
    """The options the run was submitted with (run.json "argv", program name first); {} when unknown."""
    if not recorded_argv:
        return {}
    try:
        return given_options(list(recorded_argv)[1:], quiet=True)[0]
    except ValueError:  # recorded by a version with other options
        return {}


def check_resume_options(argv: Sequence[str], recorded_argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Refuse every option a resume cannot honour, named (one given as the run was made with it is
    harmless, and ignored); return the resource overrides given."""
    given, flags = given_options(argv)
    original = made_with(recorded_argv)
    refused = sorted(d for d in given if d not in (*APPLIED, *NEUTRAL, *ACCEPTS)
                     and not (d in original and original[d] == given[d]))
    if refused:
        names = ", ".join(flags.get(d, d) for d in refused)
        raise UsageError(f"--resume continues a run exactly as it was made: {names} cannot change on resume "
                         "(they decide the content or the run's layout; given as the run was made with them, "
                         "they are ignored); start a new run for that. "
                         "A resume may change --mem, --time, --cpus-per-task, --partition, --account and --max-tasks, "
                         "and take --release-changed")
    overrides = {d: given[d] for d in APPLIED if d in given}
    for dest, value in overrides.items():  # the rules a submission's --mem, --time, ... follow
        check_setting(APPLIED[dest], str(value), flags.get(dest, dest))
    return overrides


def resume_resources(argv: Sequence[str], record: dict[str, Any]) -> dict[str, Any]:
    """This resume's resource options over those of earlier resumes (run.json "resources"): a later
    resume keeps an earlier --mem or --partition unless it gives another."""
    return {**record.get("resources", {}), **check_resume_options(argv, record.get("argv"))}


def with_resources(cfg: RunConfig, resources: dict[str, Any]) -> RunConfig:
    """The run's config with a resume's --mem/--time (execution only: never hashed). A language's run dir
    keeps one unit's resources: C lives in languages.json (run/unit_table.py with_cpus)."""
    return RunConfig(cfg.content, cfg.execution.with_resources(resources.get("mem"), resources.get("time")))


def keep_release_changed(run: RunDir) -> RunConfig:
    """Record a resume's --release-changed in config.json's execution, where the plan and finalize read it
    (never hashed: the content and its hash stay). Returns the config as written."""
    on_disk = load_config(run)
    new = RunConfig(on_disk.content, dataclasses.replace(on_disk.execution, release_changed=True))
    if new != on_disk:
        write_json_atomic(run.config_json, new.to_json())
    return new


def with_settings(settings, resources: dict[str, Any]):
    """The submitter's settings with a resume's --partition, --account and --max-tasks (earlier ones kept)."""
    kept = {dest: int(v) if dest == "max_tasks" else str(v) for dest, v in resources.items()
            if dest in ("worker_partition", "account", "max_tasks")}
    return dataclasses.replace(settings, **kept) if settings is not None and kept else settings


def restore_resources(run_json: Path, kept: dict[str, Any] | None) -> None:
    """Put back the resources run.json had before a resume whose submission sbatch refused."""
    record = read_run_json(run_json)
    if kept:
        record["resources"] = kept
    else:
        record.pop("resources", None)
    write_json_atomic(run_json, record)


def keep_resources(run_json: Path, resources: dict[str, Any]) -> None:
    """Record a resume's resources in run.json, for later resumes and --status, and say them."""
    if not resources:
        return
    record = read_run_json(run_json)
    record["resources"] = resources
    write_json_atomic(run_json, record)
    print(f"resources for the resubmitted tasks: {', '.join(f'{k}={v}' for k, v in resources.items())}")
