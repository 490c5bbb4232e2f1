"""Options refused before anything runs, --dry-run included: counts and sizes a run cannot use, and
content options that would fail later (at the manifest or the balance). Path checks are guards.py's.
"""
from __future__ import annotations

from shard_pipeline.contract.manifest import check_manifest_args
from shard_pipeline.errors import UsageError
from shard_pipeline.submit.request import Request


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
