"""The plan of a new run before anything is written: settings, executor, and each language's input shards,
known counts, head sample and job layout, with its share of the task budget. `--dry-run` shows all of it."""
from __future__ import annotations

import dataclasses
import getpass
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.errors import UsageError, UserError
from shard_pipeline.paths import PRESET_DIR, home
from shard_pipeline.run.unit_table import group_count
from shard_pipeline.submit import guards, languages
from shard_pipeline.submit.languages import input_root
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.stages.balance import parse_dp_ranks
from shard_pipeline.submit.args import Request
from shard_pipeline.submit.slurm_limits import SubmitCap, submit_cap


@contextmanager
def usage_errors():
    """Turn the ValueError of a parser of user input into a UsageError (one line, exit 2)."""
    try:
        yield
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_settings(args: Request):
    from shard_pipeline.submit.settings import load_settings

    cli = {
        "ACCOUNT": args.account,
        "WORKER_PARTITION": args.worker_partition,
        "COUNTS_INDEX": args.counts_index,
        "MAX_TASKS": str(args.max_tasks) if args.max_tasks is not None else None,
        "LICENSE": args.license,
        "PRESET": args.preset,
        "WORKER_MEM": args.mem,
        "TIME_LIMIT": args.time,
        "CPUS_PER_TASK": str(args.cpus_per_task) if args.cpus_per_task is not None else None,
    }
    return load_settings(cli=cli, conf_path=args.conf, repo_root=home(), preset_dir=PRESET_DIR)


def find_inputs(args: Request, settings) -> tuple[str, list]:
    """(subset, shards): subset is the HPLT subset (clean) or a non-HPLT corpus's own name (identity.py)."""
    from shard_pipeline.input.corpus import find_shards, parse_sources, parse_wds

    with usage_errors():  # the specs are user input: their ValueError is a usage error
        for spec, parse in ((args.wds, parse_wds), (args.sources, parse_sources)):
            if spec is not None:
                parse(spec)

    root = input_root(args, settings)
    base_url = None
    if root is None:
        if args.corpus == "v4":
            raise UsageError("v4 needs --local-root (or V4_ROOT in the conf/preset): HPLT v4 has no public shard map")
        base_url = settings.v3_base_url
    shards = find_shards(args.lang, corpus=args.corpus, local_root=root, base_url=base_url, wds=args.wds,
                         sources=args.sources, corpus_name=args.corpus_name)
    return corpus_names(args, settings).name, shards


def corpus_names(args: Request, settings):
    """identity.CorpusNames of this run's root: HPLT release names, or the corpus's own (--corpus-name)."""
    import os

    from shard_pipeline.input.identity import URL_SUBSET, names_for

    root = input_root(args, settings)
    folder = os.path.basename(os.path.abspath(root)) if root is not None else URL_SUBSET
    with usage_errors():
        return names_for(args.corpus, folder, args.corpus_name)


def index_key(args: Request, settings) -> tuple[str, str]:
    """Where this root's rows live in the counts index: the sampler's <corpus>/<subset> only for the
    HPLT roots a shipped preset names, else custom/<name>-<hash of the resolved root> (identity.py)."""
    from shard_pipeline.input.identity import index_key as key
    from shard_pipeline.input.identity import known_hplt_roots
    from shard_pipeline.submit.settings import preset_values

    return key(args.corpus, input_root(args, settings), known_hplt_roots(preset_values(PRESET_DIR)),
               corpus_names(args, settings).name)


def index_line(args: Request, settings, langs: Sequence[str]) -> str:
    """--dry-run's line: the index files (one per language) this run reads and, at finalize, adds its rows to."""
    if not settings.counts_index:
        return "counts index     off (COUNTS_INDEX unset, or {ACCOUNT} in it with no ACCOUNT)"
    names = corpus_names(args, settings)
    what = f"HPLT {args.corpus} {names.name}" if names.hplt else f"{names.name}, not HPLT"
    files = ", ".join(str(Path(settings.counts_index).joinpath(*index_key(args, settings), f"{l}.tsv")) for l in langs)
    return f"counts index     {files} ({what})"


def index_warning(settings) -> str | None:
    """Said at submit: an index whose folder a run may not make (counts_index.make_root) is read, never written."""
    root = settings.counts_index
    if not root or Path(root).is_dir():
        return None
    if Path(root).exists():
        return f"the counts index {root} is not a folder: this run reads no counts from it and writes none"
    if Path(root).parent.is_dir():
        return None
    return (f"the counts index {root} does not exist and neither does its parent folder {Path(root).parent}: "
            "this run reads no counts from it and does not make it (set COUNTS_INDEX or --counts-index to a folder "
            "of your own project)")


def index_rows(settings, key: tuple[str, str], lang: str):
    """The counts-index file of this language (counts_index.IndexRows), read once; None when there is none. One this
    user cannot read (a colleague's umask) or that is no index is a warning: the run counts its inputs itself."""
    from shard_pipeline.input.counts_index import index_path, read_index

    if not settings.counts_index:
        return None
    try:
        return read_index(Path(settings.counts_index), *key, lang)
    except (OSError, ValueError) as exc:
        path = index_path(Path(settings.counts_index), *key, lang)
        why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc).removeprefix(f"{path}: ")
        print(f"hplt-shard: warning: the counts index file {path} cannot be read ({why}): this run counts its "
              "inputs itself, and finalize's rows go there only if it can write it", file=sys.stderr)
        return None


def warn_first(warnings: list[str], more: str) -> None:
    """The first ten warnings, then how many `more` (run.json lists them all: `index_record`)."""
    for line in warnings[:10]:
        print(f"hplt-shard: warning: {line}", file=sys.stderr)
    if len(warnings) > 10:
        print(f"hplt-shard: warning: {len(warnings) - 10} more {more} (all listed in run.json at submit)",
              file=sys.stderr)


def index_record(disagree: Sequence, impossible: Sequence) -> dict:
    """run.json's record of what the counts index said of the inputs at submit: rows that no longer match
    their file, and rows that cannot be true (ignored)."""
    rec = {}
    if disagree:
        rec["counts_index_disagreements"] = [d.to_json() for d in disagree]
    if impossible:
        rec["counts_index_impossible"] = [r.to_json() for r in impossible]
    return rec


def choose_executor(args: Request, recorded: str | None = None) -> str:
    """--executor, else the run's own (on resume), else slurm where sbatch is on PATH; slurm needs sbatch."""
    executor = args.executor or recorded or ("slurm" if shutil.which("sbatch") else "local")
    if executor == "slurm" and not shutil.which("sbatch"):
        raise UsageError("the Slurm executor needs sbatch, which is not on PATH: run this on a Slurm login node "
                         "(on LUMI it is there after login), or use --executor local")
    return executor


@dataclass(frozen=True)
class QueueRoom:
    """How many more jobs the user may queue now, and the cap that says so."""

    free: int
    cap: SubmitCap


def queue_room(settings) -> QueueRoom | None:
    """What the user's submit cap leaves (queued jobs counted): the association's MaxSubmitJobs where
    sacctmgr reads it, else SUBMIT_LIMIT (slurm_limits.submit_cap); None where no cap is known."""
    from shard_pipeline.submit.executors.slurm import queued_jobs

    cap = submit_cap(settings.submit_limit, settings.account, getpass.getuser())
    if cap is None:
        return None
    free = cap.limit - queued_jobs(account=cap.account)
    if free < 4:
        raise UsageError(f"only {max(free, 0)} of the {cap.limit} jobs you may have queued ({cap.source}) are free; "
                         "a run needs at least 4 (partition, plan, write, finalize): wait for some of your jobs "
                         "to end (squeue --me), then submit again")
    return QueueRoom(free, cap)


def local_budget(jobs: int, cpus: int) -> int:
    """The local executor's task budget: one partition and one write unit per core, plus plan and finalize (more,
    smaller units only add start-ups; bench/RESULTS.md 3)."""
    return 2 * max(1, jobs // cpus) + 2


def make_layout(args, settings, shards, known, executor: str, sample, budget: int, cpus: int | None = None,
                partition_tasks: int | None = None) -> layout_mod.Layout:
    """The job layout; the head sample gives the largest document, which sizes task memory.
    A language of a run of several is laid out in units (`cpus` 1, `budget` its share of units)."""
    guards.check_numbers(args)
    lay = layout_mod.lay_out_jobs(
        [s.size for s in shards],
        known,
        shard_rows=args.shard_rows,
        shard_bytes=args.shard_bytes,
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks else (),
        task_budget=budget,
        worker_mem=settings.worker_mem,
        time_limit=settings.time_limit,
        partition_tasks=partition_tasks or args.partition_tasks,
        write_tasks=args.write_tasks,
        buckets=args.buckets,
        spill_bytes=args.spill_bytes,
        compressed_per_doc=sample.compressed_per_doc,
        text_per_doc=sample.text_per_doc,
        row_group_bytes=args.row_group_bytes,
        cpus=settings.cpus_per_task if cpus is None else cpus,
        largest_text=sample.largest_text,
        largest_line=sample.largest_line,
    )
    guards.check_write_tasks(args, lay.est_docs, budget, executor)
    return lay


def check_fits_room(partition_groups: int, write_groups: int, room: QueueRoom) -> None:
    """Refuse, before anything is queued, a chain with more array tasks than the submit cap leaves (given
    --partition-tasks/--write-tasks override the layout's own fit): sbatch would refuse it midway."""
    queued = partition_groups + write_groups + 2
    if queued > room.free:
        raise UsageError(f"this run would queue {queued} array tasks ({partition_groups} partition, plan, "
                         f"{write_groups} write, finalize) but only {room.free} of the {room.cap.limit} jobs you may "
                         f"have queued ({room.cap.source}) are free: give fewer --partition-tasks/--write-tasks (or "
                         "none: the layout fits itself), or a larger --cpus-per-task (C units per array task)")


def runs_roots() -> list[Path]:
    """Where run directories are made by default: the conf's RUNS_ROOT and runs/ beside the conf (publish
    looks for the run that wrote an output in both)."""
    from shard_pipeline.submit.settings import load_settings

    try:
        configured = load_settings(cli={}, conf_path=None, repo_root=home(), preset_dir=PRESET_DIR).runs_root
    except (UserError, OSError):
        configured = home() / "runs"
    return list(dict.fromkeys([configured, home() / "runs"]))


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
    subset, shards = find_inputs(args, settings)
    key = index_key(args, settings)
    note = index_warning(settings)
    if note:
        print(f"hplt-shard: warning: {note}", file=sys.stderr)
    index = index_rows(settings, key, args.lang)
    rows = index.rows if index is not None else {}
    impossible = index.impossible_of(shards) if index is not None else []
    if impossible:  # ignored: lookup never sees them, so the run counts these files itself
        warn_first([row.describe(index.path) for row in impossible], f"rows of {index.path} cannot be true")
    from shard_pipeline.input.counts_index import disagreements, lookup
    from shard_pipeline.input.index_check import refuse_shortfalls, submit_step
    from shard_pipeline.input.shape import annotation_probe, check_record_shape
    from shard_pipeline.stages.buckets import sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    check_record_shape(shards, args.corpus)
    fields = guards.annotation_fields(args)
    per_doc = annotation_probe(shards, fields) if fields else 0.0
    by_name = lookup(rows, shards)
    known = {i: by_name[s.name] for i, s in enumerate(shards) if s.name in by_name}
    # by size, and by documents where the sample read a file to its end; a file cut mid-frame is skipped by the sample
    read = {shards[i].name: n for i, n in sample.complete.items()}
    refuse_shortfalls(index, shards, read, args.release_changed, submit_step)  # at --dry-run too
    disagree = disagreements(rows, shards, read)
    # HPLT releases are immutable: a file that no longer matches its row is a signal
    warn_first([f"{d.describe()} (was the file replaced?)" for d in disagree],
                     "input shards disagree with the counts index")
    lay = make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample, budget)
    big = layout_mod.doc_memory_warning(lay, settings.worker_mem, sample.largest_at)
    if big:  # the layout already raised the tasks; where memory is enforced, --mem is the user's to know
        print(f"hplt-shard: warning: {big}", file=sys.stderr)
    dp = guards.dp_ranks_note(args, lay.est_docs, lay.inputs_unknown == 0)
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


def total_budget(args: Request, settings, executor: str, n: int, room: QueueRoom | None) -> int:
    """MAX_TASKS, and under Slurm also what the user's submit cap leaves (queue_room)."""
    if executor == "slurm":
        return min(settings.max_tasks, room.free) if room else settings.max_tasks
    # locally tasks are process starts, not queue slots; as a single run, groups of C count once
    return max(local_budget(args.jobs, settings.cpus_per_task), 2 * n + 2)


def prepare_all(args: Request, settings, executor: str, langs: list[str]) -> Languages:
    """Lay out every language in units (one core each; array tasks pack them across languages): the languages
    share the budget's units in proportion to bytes. The dry-run also shows the layout each would get alone."""
    queue = queue_room(settings) if executor == "slurm" else None
    budget = total_budget(args, settings, executor, len(langs), queue)
    first = {l: prepare(args.for_language(l), settings, executor, budget=budget) for l in langs}
    room = languages.unit_room(budget, settings.cpus_per_task)
    shares = languages.share_budget([first[l].lay.compressed_bytes for l in langs], room)
    scopes = {}
    for l, share in zip(langs, shares):
        sc = first[l]
        p = args.partition_tasks or languages.partition_units(len(sc.shards), share)
        lay = make_layout(args.for_language(l), settings, sc.shards, {**sc.sample.complete, **sc.known}, executor,
                                sc.sample, share + 2, cpus=1, partition_tasks=p)
        scopes[l] = dataclasses.replace(sc, lay=lay)
    if queue is not None:  # the chain's array tasks, C units each over every language (run/unit_table.py)
        c = settings.cpus_per_task
        check_fits_room(group_count(sum(scopes[l].lay.partition_tasks for l in langs), c),
                              group_count(sum(scopes[l].lay.write_tasks for l in langs), c), queue)
    return Languages(langs, scopes, {l: first[l].lay for l in langs}, budget)


def unit_scope(sc: Scope) -> Scope:
    """A language's scope with one unit's resources: the array task, not the language's run dir, groups units (C global units, of any language; run/unit_table.py), so the
    language's run dir keeps what one unit needs and its --status counts units as a C = 1 run."""
    return dataclasses.replace(sc, lay=dataclasses.replace(sc.lay, resources=layout_mod.unit_resources(sc.lay.resources),
                                                           cpus=1, partition_groups=sc.lay.partition_tasks,
                                                           write_groups=sc.lay.write_tasks))


