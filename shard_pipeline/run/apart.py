"""Which folders a run must keep apart: it removes or replaces only what it can prove it made (OUT, a
previous output; its own OUT.tmp, marked inside; its own run directory), so no two of the run directory,
the input root, OUT and what a run keeps beside OUT may be the same folder or lie one inside the other,
and OUT lies in no other output. The rule book (run/rulebook.py) says when these are checked.
"""
from __future__ import annotations

import os
from pathlib import Path

from shard_pipeline.contract.beside import root_work_folder
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import TMP_MARKER, parking_dir_for, tmp_dir_for, tmp_owner
from shard_pipeline.errors import UsageError
from shard_pipeline.run.claim import claim_lock_path, claim_path, publish_lock_path


def inside(a: Path, b: Path) -> bool:
    """True when `a` is `b` or lies under it."""
    return a == b or b in a.parents


def check_no_overlap(named: dict[str, Path | None]) -> None:
    """Refuse any two of these folders that are equal or nested, in either direction (one message per pair)."""
    items = [(name, Path(os.path.realpath(p))) for name, p in named.items() if p is not None]
    for i, (na, a) in enumerate(items):
        for nb, b in items[i + 1:]:
            if a == b:
                raise UsageError(f"{na} {a} and {nb} {b} are the same path; they must be apart")
            if inside(a, b) or inside(b, a):
                inner, outer = ((na, a), (nb, b)) if inside(a, b) else ((nb, b), (na, a))
                raise UsageError(f"{inner[0]} {inner[1]} lies inside {outer[0]} {outer[1]}; they must be apart "
                                 "(a run replaces OUT and OUT.tmp and never touches its inputs)")


def enclosing_output(out: Path) -> str | None:
    """The output or staging folder of another run that `out` lies inside, said as the reason, or None.

    A folder under an output (an ancestor holds _MANIFEST.json) is a stray file of that output (its
    --verify fails, its next run removes it); a folder under a marked X.tmp (or a marked parking
    folder) is swapped away or removed with it. The marker never stays in an OUT (replace.py).
    A multi-language root holds no manifest, so OUT/<LANG> under it is not refused here."""
    for parent in Path(os.path.realpath(out)).parents:
        try:  # a folder we may not look into is no output we could tell: the later checks say more
            if (parent / MANIFEST_NAME).is_file():
                return f"inside the output {parent} (it holds {MANIFEST_NAME})"
            owner = tmp_owner(parent)  # X.tmp, or X.replaced holding a parked previous version
        except OSError:
            continue
        if owner is not None:
            return f"inside {parent}, the staging folder of the run {owner} (it holds {TMP_MARKER})"
    return None


def check_out_not_enclosed(out: Path) -> None:
    """Refuse an OUT inside another output or another run's OUT.tmp: that run would remove or ship it."""
    where = enclosing_output(out)
    if where is not None:
        raise UsageError(f"--out {out} lies {where}; an output may not be nested in another: "
                         "choose an --out outside it")


def beside_out(out: Path) -> dict[str, Path]:
    """What runs and publishes keep beside an OUT (or a root of several languages): no run dir or input there."""
    return {"OUT.tmp": tmp_dir_for(out), "OUT.replaced": parking_dir_for(out), "OUT's claim": claim_path(out),
            "OUT's claim lock": claim_lock_path(out), "OUT's publish lock": publish_lock_path(out),
            "the work folder beside OUT (a root's)": root_work_folder(out)}
