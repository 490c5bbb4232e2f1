"""Checks at submit time on the paths a request names: --out itself, the dataset OUT holds, the counts
index; and the languages a run names in ROOT's manifest before it claims anything. The rules on OUT and
the moments that check them are the rule book's (run/rulebook.py).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from shard_pipeline.contract import root_manifest
from shard_pipeline.contract.replace import tmp_dir_for
from shard_pipeline.errors import UsageError
from shard_pipeline.run.apart import inside
from shard_pipeline.run.rulebook import Context, Moment, preflight


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


@contextlib.contextmanager
def doing(what: str):
    """Turn an OSError inside into one line saying what was being done, the path and the reason."""
    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise UsageError(f"{what} failed: {where}{exc.strerror or exc}") from None


@contextlib.contextmanager
def languages_named(outs: dict[str, Path], out_is_root: bool, root: Path):
    """ROOT's root manifest names the languages asked for, before anything is claimed (contract/root_manifest.py);
    a submission that fails inside the block takes back what it added there (and a ROOT it made)."""
    roots = {out.parent for out in outs.values() if out_is_root}
    before = {r: (r.exists(), root_manifest.read_root_manifest(r)) for r in roots}
    try:
        name_languages(outs, out_is_root, root)
        yield
    except BaseException:
        for r, (had_root, earlier) in before.items():
            if earlier is None:
                root_manifest.root_manifest_path(r).unlink(missing_ok=True)
            else:
                root_manifest.take_back(r, {o.name for o in outs.values()} - set(earlier.asked))
            if not had_root:
                with contextlib.suppress(OSError):
                    r.rmdir()  # only when empty
        raise


def name_languages(outs: dict[str, Path], out_is_root: bool, root: Path) -> None:
    """Each language joins its root's manifest, checked free where its working files now live."""
    for lang, out in outs.items():
        ctx = Context(out, root / lang)
        preflight(Moment.SUBMIT, ctx)  # where the files are now: a run of one language may hold ROOT/LANG there
        root_manifest.ask(out.parent, [out.name], make=out_is_root)
        preflight(Moment.SUBMIT, ctx)
