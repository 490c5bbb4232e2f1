"""The plan of a new run, before anything is written: each language's inputs, head sample and job
layout, with its share of the task budget (a run of one language is a run of several with one element)."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

from shard_pipeline.errors import UsageError
from shard_pipeline.run.unit_table import group_count
from shard_pipeline.submit import languages, option_checks, scope
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit.request import Request


@dataclass(frozen=True)
class Scope:
    """One language's inputs and job layout: what --dry-run shows and a run dir is made from."""

    subset: str
    shards: list
    sample: Any  # buckets.HeadSample
    lay: layout_mod.Layout
    known: dict[int, int]  # input index -> documents, from the counts index
    disagree: tuple = ()  # counts-index rows that no longer match their file
    impossible: tuple = ()  # counts-index rows of these inputs that cannot be true (ignored)
    annotation_bytes: float = 0.0  # --annotations: the kept fields' mean bytes per document, from the first records


def prepare(args: Request, settings, executor: str, budget: int) -> Scope:
    """Inputs, known counts, head sample and layout of args.lang (`budget`: this language's share of the tasks)."""
    if not settings.license:
        raise UsageError("no license: give --license SPDX or LICENSE in the conf (HPLT presets use CC0-1.0)")
    subset, shards = scope.find_inputs(args, settings)
    key = scope.index_key(args, settings)
    note = scope.index_warning(settings)
    if note:
        print(f"hplt-shard: warning: {note}", file=sys.stderr)
    index = scope.index_rows(settings, key, args.lang)
    rows = index.rows if index is not None else {}
    impossible = index.impossible_of(shards) if index is not None else []
    if impossible:  # ignored: lookup never sees them, so the run counts these files itself
        scope.warn_first([row.describe(index.path) for row in impossible], f"rows of {index.path} cannot be true")
    from shard_pipeline.input.counts_index import disagreements, lookup
    from shard_pipeline.input.index_check import refuse_shortfalls, submit_step
    from shard_pipeline.input.shape import annotation_probe, check_record_shape
    from shard_pipeline.stages.buckets import sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    check_record_shape(shards, args.corpus)
    fields = option_checks.annotation_fields(args)
    per_doc = annotation_probe(shards, fields) if fields else 0.0
    by_name = lookup(rows, shards)
    known = {i: by_name[s.name] for i, s in enumerate(shards) if s.name in by_name}
    # by size, and by documents where the sample read a file to its end; a file cut mid-frame is skipped by the sample
    read = {shards[i].name: n for i, n in sample.complete.items()}
    refuse_shortfalls(index, shards, read, args.release_changed, submit_step)  # at --dry-run too
    disagree = disagreements(rows, shards, read)
    # HPLT releases are immutable: a file that no longer matches its row is a signal
    scope.warn_first([f"{d.describe()} (was the file replaced?)" for d in disagree],
                     "input shards disagree with the counts index")
    lay = scope.make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample, budget)
    big = layout_mod.doc_memory_warning(lay, settings.worker_mem, sample.largest_at)
    if big:  # the layout already raised the tasks; where memory is enforced, --mem is the user's to know
        print(f"hplt-shard: warning: {big}", file=sys.stderr)
    dp = option_checks.dp_ranks_note(args, lay.est_docs, lay.inputs_unknown == 0)
    if dp:
        print(f"hplt-shard: warning: {dp}", file=sys.stderr)
    return Scope(subset, shards, sample, lay, known, tuple(disagree), tuple(impossible), per_doc)


@dataclass(frozen=True)
class Languages:
    """The languages of a run, each with its scope (with its share of the task budget)."""

    langs: list[str]
    scopes: dict[str, Scope]
    alone: dict[str, Any]  # layout.Layout each language would get in a run of its own
    budget: int  # the queued tasks the languages share


def total_budget(args: Request, settings, executor: str, n: int, room: scope.QueueRoom | None) -> int:
    """MAX_TASKS, and under Slurm also what the user's submit cap leaves (scope.queue_room)."""
    if executor == "slurm":
        return min(settings.max_tasks, room.free) if room else settings.max_tasks
    # locally tasks are process starts, not queue slots; as a single run, groups of C count once
    return max(scope.local_budget(args.jobs, settings.cpus_per_task), 2 * n + 2)


def prepare_all(args: Request, settings, executor: str, langs: list[str]) -> Languages:
    """Lay out every language; the languages (one or more) share the budget's units in proportion to bytes,
    and the dry-run also shows the layout each would get alone.

    Languages are laid out in units (one core each): their array tasks of C units are packed across
    languages (run/unit_table.py), so a language's units, not array tasks, are its share, and every
    unit reads about the same bytes: one time limit fits the array."""
    queue = scope.queue_room(settings) if executor == "slurm" else None
    budget = total_budget(args, settings, executor, len(langs), queue)
    first = {l: prepare(args.for_language(l), settings, executor, budget=budget) for l in langs}
    room = languages.unit_room(budget, settings.cpus_per_task)
    shares = languages.share_budget([first[l].lay.compressed_bytes for l in langs], room)
    scopes = {}
    for l, share in zip(langs, shares):
        sc = first[l]
        p = args.partition_tasks or languages.partition_units(len(sc.shards), share)
        lay = scope.make_layout(args.for_language(l), settings, sc.shards, {**sc.sample.complete, **sc.known}, executor,
                                sc.sample, share + 2, cpus=1, partition_tasks=p)
        scopes[l] = dataclasses.replace(sc, lay=lay)
    if queue is not None:  # the chain's array tasks, C units each over every language (run/unit_table.py)
        c = settings.cpus_per_task
        scope.check_fits_room(group_count(sum(scopes[l].lay.partition_tasks for l in langs), c),
                              group_count(sum(scopes[l].lay.write_tasks for l in langs), c), queue)
    return Languages(langs, scopes, {l: first[l].lay for l in langs}, budget)


def unit_scope(sc: Scope) -> Scope:
    """A language's scope with one unit's resources: the array task, not the language's run dir, groups units (C global units, of any language; run/unit_table.py), so the
    language's run dir keeps what one unit needs and its --status counts units as a C = 1 run."""
    return dataclasses.replace(sc, lay=dataclasses.replace(sc.lay, resources=layout_mod.unit_resources(sc.lay.resources),
                                                           cpus=1, partition_groups=sc.lay.partition_tasks,
                                                           write_groups=sc.lay.write_tasks))


