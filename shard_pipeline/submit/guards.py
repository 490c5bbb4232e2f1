"""Checks at submit time, --dry-run included: counts, sizes and content options a run cannot use; the paths a
request names (--out, the dataset OUT holds, the counts index); and the languages a run names in ROOT's manifest
before it claims anything. The rules on OUT and the moments that check them are the rule book's (run/rulebook.py).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from shard_pipeline.contract import root_manifest
from shard_pipeline.contract.manifest import check_manifest_args
from shard_pipeline.contract.replace import tmp_dir_for
from shard_pipeline.errors import UsageError
from shard_pipeline.run.rulebook import inside
from shard_pipeline.run.rulebook import Context, Moment, preflight
from shard_pipeline.submit.args import Request


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


# Integer options that count or size something: 0 or less means nothing sensible.
AT_LEAST_ONE = ("shard_rows", "row_group_bytes", "shard_bytes", "partition_tasks", "write_tasks", "buckets",
                "spill_bytes", "jobs")


def check_numbers(args: Request) -> None:
    """Refuse a count or size option below 1, and --val-permille outside [0, 1000], --dry-run included."""
    for name in AT_LEAST_ONE:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}"
                             + ("; leave it out for the layout's own choice" if name.endswith(("tasks", "buckets",
                                                                                                  "spill_bytes")) else ""))
    if not 0 <= args.val_permille <= 1000:
        raise UsageError("--val-permille must be in [0, 1000]")


def check_write_tasks(args: Request, est_docs: int, budget: int, executor: str) -> None:
    """Refuse a local --write-tasks past the documents and the budget (10^8, a typo): it would fill the run dir
    with empty units. On Slurm the submit cap refuses it; a --partition-tasks is cut back by the packing."""
    w = args.write_tasks
    if executor == "local" and w is not None and w > max(1, est_docs) and w > budget:
        raise UsageError(f"--write-tasks {w:,} is more than the about {est_docs:,} documents of this run and the "
                         f"{budget:,} tasks the local executor runs in its budget; every task past the documents "
                         "would start empty: give fewer (one per output shard is plenty), or leave it out")


def dp_ranks_note(args: Request, est_docs: int, docs_known: bool) -> str | None:
    """--dp-ranks with fewer documents than lcm(ranks): no shard count can be a multiple of it without
    empty shards (balance.shard_count_for), so the balance cannot hold. Refused when the counts are
    known (they only shrink: cleaning, a split), said in the summary when they are estimated."""
    if args.dp_ranks is None:
        return None
    from shard_pipeline.stages.balance import parse_dp_ranks, shard_multiple

    m = shard_multiple(parse_dp_ranks(args.dp_ranks))
    if est_docs < m:
        said = (f"--dp-ranks {args.dp_ranks}: the shard count must be a multiple of {m:,} (their lcm), but this run "
                f"has {'only' if docs_known else 'an estimated'} {est_docs:,} documents, and a shard is never empty")
        if docs_known:
            raise UsageError(said + ": give rank counts whose lcm is at most the documents, or leave --dp-ranks out")
        return said + "; if so, the shard count will not divide over the ranks (the run says so when it is done)"
    if args.split_layout == "dirs":  # each set is cut on its own: the smaller one (validation, by default) may fall short
        sets = {"train/": (est_docs * (1000 - args.val_permille) // 1000, args.val_permille < 1000),
                "validation/": (est_docs * args.val_permille // 1000, args.val_permille > 0)}
        short = {name: n for name, (n, made) in sets.items() if made and n < m}
        if short:
            name, n = next(iter(short.items()))
            return (f"{args.lang}: --dp-ranks {args.dp_ranks} with --split-layout dirs: each set's shard count must be a multiple of "
                    f"{m:,} (their lcm), but {name} will hold about {n:,} documents (--val-permille {args.val_permille}), "
                    "and a shard is never empty: its shard count will not divide over the ranks (the run says so "
                    "when it is done)")
    return None


def check_content_args(args: Request) -> None:
    """Content options that would fail later (at the manifest) are refused now, --dry-run included."""
    check_numbers(args)
    try:
        check_manifest_args(dataset=args.dataset or "default", version=args.dataset_version, config_sha256="0" * 64,
                            filters=None, dedup=None, ledger_ref="LEDGER.jsonl")
    except ValueError as exc:
        raise UsageError(f"--dataset-version/--dataset: {exc}") from None
    if args.dataset is not None and not args.dataset:
        raise UsageError("--dataset must not be empty")
    annotation_fields(args)
    if args.dp_ranks is not None:
        from shard_pipeline.stages.balance import parse_dp_ranks

        try:
            parse_dp_ranks(args.dp_ranks)
        except ValueError as exc:
            raise UsageError(f"--dp-ranks: {exc}") from None


def annotation_fields(args: Request) -> tuple[str, ...]:
    """The HPLT fields --annotations names, presets expanded; () without it. A name that is neither is refused."""
    if args.annotations is None:
        return ()
    from shard_pipeline.input.annotations import UnknownField, resolve_fields

    try:
        fields = resolve_fields(args.annotations, args.corpus)
    except UnknownField as exc:
        raise UsageError(str(exc)) from None
    if not fields:
        raise UsageError("--annotations names no field (presets: quality, register, lid; or HPLT field names)")
    return fields
