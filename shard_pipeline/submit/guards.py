"""Checks at submit time that keep a run from touching what it did not make.

A run removes or replaces only what it can prove it made: OUT (a previous output), its own
OUT.tmp (marked inside) and its own run directory. So no two of the run directory, the input
root, OUT and OUT.tmp may be the same folder or lie one inside the other.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterable

from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract import root_manifest
from shard_pipeline.contract.beside import root_work_folder
from shard_pipeline.contract.replace import TMP_MARKER, parking_dir_for, tmp_dir_for, tmp_owner
from shard_pipeline.errors import UsageError
from shard_pipeline.run.rulebook import Context, Moment, preflight


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


def check_out_path(out_arg: Path) -> Path:
    """The absolute OUT; a symlink there is refused (the contract: never follow a link to replace it)."""
    given = Path(os.path.abspath(out_arg))
    if given.parent == given:
        raise UsageError(f"--out {given} is the filesystem's root: a run replaces OUT whole; give a folder of its own "
                         "(e.g. --out /scratch/NAME)")
    if given.is_symlink():
        raise UsageError(f"--out {given} is a symbolic link (to {os.readlink(given)}); give the real folder")
    return given.resolve()


def out_holds(out: Path, held) -> str:
    """What OUT holds now, for --dry-run and the submit note (`held`: check_replaceable's answer)."""
    if held is not None:
        return f"--out {out} holds {held.summary()}; this run replaces it when it finishes"
    if out.exists():
        return f"--out {out} is an empty folder"
    return f"--out {out} does not exist yet"


def check_same_dataset(out: Path, held, dataset: str, replace_other: bool) -> None:
    """Refuse to replace an OUT holding another dataset (another language, by default names) unless
    --replace-other says so; an older version of the same dataset is replaced as always (#21)."""
    if held is None or replace_other:
        return
    theirs = held.manifest.get("dataset")
    if theirs != dataset:
        raise UsageError(f"--out {out} holds dataset {theirs!r}, this run makes {dataset!r}: replacing another "
                         "dataset is a decision; add --replace-other to replace it, or choose another --out")


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


def check_counts_index_path(index: Path | None, outs: list[Path], input_root: Path | None) -> None:
    """Refuse a counts index inside an OUT, its OUT.tmp or the input root: its rows would be stray
    files of the output (failing --verify) or written into the corpus. Inside the run dir is allowed:
    the run owns that folder (the index is then kept only as long as the run dir)."""
    if index is None:
        return
    where = Path(os.path.realpath(index))
    named = [(f"--out {o}", o) for o in outs] + [(f"OUT.tmp {tmp_dir_for(o)}", tmp_dir_for(o)) for o in outs]
    if input_root is not None:
        named.append((f"the input root {input_root}", input_root))
    for name, folder in named:
        if inside(where, Path(os.path.realpath(folder))):
            raise UsageError(f"--counts-index {index} lies inside {name}; the index is written at finalize and "
                             "must not land in an output or the corpus: set --counts-index (conf COUNTS_INDEX) "
                             "to a folder outside them")


def beside_out(out: Path) -> dict[str, Path]:
    """What runs and publishes keep beside an OUT (or a root of several languages): no run dir or input there."""
    from shard_pipeline.run.claim import claim_lock_path, claim_path, publish_lock_path

    return {"OUT.tmp": tmp_dir_for(out), "OUT.replaced": parking_dir_for(out), "OUT's claim": claim_path(out),
            "OUT's claim lock": claim_lock_path(out), "OUT's publish lock": publish_lock_path(out),
            "the work folder beside OUT (a root's)": root_work_folder(out)}


def check_new_run_paths(out: Path, run_root: Path, input_root: Path | None) -> None:
    """Before anything is written: the run dir, the inputs, OUT and what a run keeps beside OUT (OUT.tmp,
    OUT.replaced, the claim and lock files) apart, OUT in no other output, and no OUT.tmp this run did not make."""
    check_no_overlap({"--run-dir": run_root, "input root": input_root, "--out": out, **beside_out(out)})
    check_out_not_enclosed(out)


@contextlib.contextmanager
def doing(what: str):
    """Turn an OSError inside into one line saying what was being done, the path and the reason."""
    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise UsageError(f"{what} failed: {where}{exc.strerror or exc}") from None


@contextlib.contextmanager
def languages_named(outs: list[Path], several: bool, root: Path):
    """ROOT's root manifest names the languages asked for, before anything is claimed: a run of several makes it,
    a run of one language into ROOT/LANG adds its language to a root that has one (contract/root_manifest.py).
    From then on each language's working files live beside ROOT (contract/beside.py): checked free there too.
    A submission that fails inside the block removes the root manifest (and ROOT) it made: nothing stays."""
    roots = {out.parent for out in outs if several}
    before = {r: (r.exists(), root_manifest.read_root_manifest(r)) for r in roots}
    try:
        name_languages(outs, several, root)
        yield
    except BaseException:
        for r, (had_root, earlier) in before.items():
            if earlier is None:
                root_manifest.root_manifest_path(r).unlink(missing_ok=True)
            else:
                root_manifest.take_back(r, {o.name for o in outs} - set(earlier.asked))
            if not had_root:
                with contextlib.suppress(OSError):
                    r.rmdir()  # only when empty
        raise


def name_languages(outs: Iterable[Path], several: bool, root: Path) -> None:
    """Each language joins its root's manifest, checked free where its working files now live."""
    from shard_pipeline.run.claim import check_not_held

    for out in outs:
        run_root = root / out.name if several else root
        check_not_held(out, run_root)  # where the claim is now: a run of one language may hold ROOT/LANG there
        root_manifest.ask(out.parent, [out.name], make=several)
        preflight(Moment.SUBMIT, Context(out, run_root))
