"""The true next step after a run stopped at a bad record with `--bad-records fail`, or at a
document id that two input lines share.

A resume cannot help: it redoes the task on the same bad line, refuses a changed input (its size
and mtime are in shard_inventory.tsv and in the content hash) and refuses `--bad-records` (it
decides the content). Both ways on are new runs, so this prints both exact commands: the run's
own command line with a fresh `--run-dir`, once after fixing the file, once with
`--bad-records quarantine`.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Iterable, Sequence

from shard_pipeline.run.claim import claim_path, holder
from shard_pipeline.run.rundir import RunDir, read_json

BAD_RECORD = "BadRecord: "  # how a task's last error line names one (worker/task.py: `ERROR: Type: message`)
REPEATED_ID = "RepeatedId: "  # stages/order.py: two input lines with one document id
_DROPPED = {"--bad-records": 1, "--run-dir": 1, "--dry-run": 0}  # option -> how many values follow it


def fresh_run_dir(root: Path, suffix: str) -> Path:
    """`RUNDIR-suffix`, or `RUNDIR-suffix-2`, ...: a run directory is never reused."""
    candidate, n = root.with_name(f"{root.name}-{suffix}"), 2
    while candidate.exists():
        candidate, n = root.with_name(f"{root.name}-{suffix}-{n}"), n + 1
    return candidate


def new_run_argv(argv: Sequence[str], run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """The run's own command line (run.json "argv") with another --run-dir (and `extra`), for ./hplt-shard."""
    kept, i = [], 1  # argv[0] is the program
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name in _DROPPED:
            i += 1 + (_DROPPED[name] if "=" not in argv[i] else 0)
            continue
        kept.append(argv[i])
        i += 1
    return ["./hplt-shard", *kept, *extra, "--run-dir", str(run_dir)]


def bad_record_step(run: RunDir, errors: Iterable[str]) -> str | None:
    """The commands that go on after a bad record stopped a `--bad-records fail` run, or a repeated
    document id stopped any run (None: neither case): always a new run, never --resume."""
    errors = list(errors)
    bad = [e for e in errors if BAD_RECORD in e]
    repeated = [e for e in errors if REPEATED_ID in e]
    if not bad and not repeated:
        return None
    try:
        cfg, record = read_json(run.config_json), read_json(run.run_json)
    except (OSError, ValueError):
        return None
    if not record.get("argv") or (not repeated and cfg["content"].get("bad_records") != "fail"):
        return None
    argv, out = record["argv"], Path(cfg["execution"]["out"])
    held = holder(out) == str(run.root)
    unclaim = f"rm {shlex.quote(str(claim_path(out)))} && " if held else ""  # this run's claim on OUT, else refused
    fixed = shlex.join(new_run_argv(argv, fresh_run_dir(run.root, "fixed")))
    if repeated:
        where = repeated[0].split(REPEATED_ID, 1)[1]
        return (f"stopped at a {where}\n"
                "  --resume cannot go past it (it reads the same lines and refuses a changed input). Keep one "
                "of the two documents in the input, then start a new run:\n"
                f"    {unclaim}{fixed}")
    quarantined = shlex.join(new_run_argv(argv, fresh_run_dir(run.root, "quarantine"),
                                          ["--bad-records", "quarantine"]))
    where = bad[0].split(BAD_RECORD, 1)[1]
    return (f"stopped at a bad record (--bad-records fail): {where}\n"
            "  --resume cannot go past it (it reads the same line, refuses a changed input, and --bad-records "
            "decides the content). Either fix that input file and start a new run:\n"
            f"    {unclaim}{fixed}\n"
            f"  or keep the input and set bad records aside (counted, kept verbatim in RUNDIR/quarantine/):\n"
            f"    {unclaim}{quarantined}")
