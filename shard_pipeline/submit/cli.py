"""The submitter: `./hplt-shard LANG ...` finds the input, lays out the jobs, and runs or submits them."""
from __future__ import annotations

from shard_pipeline.errors import EXIT_USAGE, UserError

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.run.rundir import RUN_FORMAT, RunDir, write_json_atomic
from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig
from shard_pipeline.run.claim import claim, release
from shard_pipeline.contract.shard import DEFAULT_ROW_GROUP_BYTES, check_replaceable

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHARD_ROWS = 1_000_000


class UsageError(UserError):
    """A problem with the command line, the conf or the input selection: nothing was written."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hplt-shard",
        description="Turn one language of a sharded HPLT corpus into deterministic Parquet training shards.",
        epilog="Examples:\n"
        "  ./hplt-shard eng_Latn --corpus v4 --dry-run\n"
        "  ./hplt-shard fin_Latn --corpus v4 --wds 9-10 --out /scratch/p/fin-shards\n"
        "  ./hplt-shard eng_Latn --corpus v4 --local-root examples/hplt-v4/clean --out out/example --executor local\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("lang", nargs="?", help="HPLT language code, e.g. eng_Latn, fin_Latn")
    p.add_argument("--corpus", choices=("v3", "v4"), default="v4", help="HPLT release layout (default v4)")
    p.add_argument("--local-root", type=Path, help="folder holding LANG/ (v4 clean|noisy root, v3 sorted); default from the preset")
    p.add_argument("--wds", help="WDS scores to include: 9-10, 8,9,10, 10 (default: all shards)")
    p.add_argument("--sources", help="v4 English source tags to include: cc,ia,ab (default: all)")
    p.add_argument("--out", type=Path, help="output folder (replaced atomically when the run finishes)")
    p.add_argument("--run-dir", type=Path, help="run directory (default runs/<corpus>-<subset>-<LANG>-<wds>)")
    p.add_argument("--executor", choices=("slurm", "local"), help="default: slurm when sbatch is on PATH, else local")
    p.add_argument("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS, help=f"rows per output shard (default {DEFAULT_SHARD_ROWS:,})")
    p.add_argument("--val-permille", type=int, default=5, help="validation share in thousandths (default 5)")
    p.add_argument("--row-group-bytes", type=int, default=DEFAULT_ROW_GROUP_BYTES, help="text bytes per row group (default 64 MiB)")
    p.add_argument("--license", help="SPDX license of the packaging (conf LICENSE; HPLT presets: CC0-1.0)")
    p.add_argument("--dataset", help="dataset name in the manifest (default hplt-<corpus>-<subset>-<LANG>)")
    p.add_argument("--dataset-version", default="1", help="dataset version in the manifest (default 1)")
    p.add_argument("--bad-records", choices=("fail", "quarantine"), default="fail",
                   help="fail at the first bad record (default), or count and keep it in the run's quarantine/")
    p.add_argument("--shard-bytes", type=int,
                   help="cut shards balanced by text bytes, about this many each (instead of every --shard-rows rows)")
    p.add_argument("--dp-ranks", help="data-parallel rank counts, e.g. 128,448: the shard count becomes a multiple of "
                   "their lcm and shards are balanced by text bytes; the balance is recorded in OUT/balance.json")
    p.add_argument("--split-layout", choices=("column", "dirs"), default="column",
                   help="column (default): one shard set with a split column; dirs: OUT/train/ and OUT/validation/, "
                        "one shard set per split (rows keep their split column)")
    p.add_argument("--clean", action="store_true",
                   help="quarantine documents that match the cleaning policy (thresholds: CLEAN_* conf keys); "
                        "they are kept in OUT/quarantine.parquet with their reasons")
    p.add_argument("--dataset-card", action="store_true",
                   help="also write OUT/README.md (a dataset card for datasets.load_dataset) and OUT/LEDGER.jsonl")
    p.add_argument("--conf", type=Path, help="conf file (default ./hplt-shard.conf if present)")
    p.add_argument("--preset", help="preset name under presets/ (conf PRESET)")
    p.add_argument("--account", help="Slurm account (conf ACCOUNT)")
    p.add_argument("--partition", dest="worker_partition", help="Slurm partition (conf WORKER_PARTITION)")
    p.add_argument("--counts-index", help="shared counts index directory (conf COUNTS_INDEX)")
    p.add_argument("--max-tasks", type=int, help="array tasks this run may queue (conf MAX_TASKS)")
    p.add_argument("--mem", help="memory per task of every stage, e.g. 4G (default conf WORKER_MEM); a partition task "
                   "buffers mem/8 of text; the plan and write jobs get more when the layout estimates they need it")
    p.add_argument("--time", help="wall time per task (default estimated from bytes)")
    p.add_argument("--partition-tasks", type=int, help="override the number of partition tasks")
    p.add_argument("--write-tasks", type=int, help="override the number of write tasks")
    p.add_argument("--buckets", type=int, help="advanced: id buckets (default from the estimated documents)")
    p.add_argument("--spill-bytes", type=int, help="advanced: text bytes a partition task buffers before it spills a sorted run (default mem/8)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local executor: tasks at once (default: cores)")
    p.add_argument("--dry-run", action="store_true", help="show the scope and job layout; write and submit nothing "
                   "(with --resume: show what would be redone)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", type=Path, metavar="RUNDIR", help="finish an interrupted run: redo only what is unfinished")
    g.add_argument("--status", type=Path, metavar="RUNDIR", help="show where a run stands (per stage, failures, ETA)")
    g.add_argument("--verify", type=Path, metavar="OUT", help="check an output folder against its manifest and the contract")
    g.add_argument("--publish", nargs=2, metavar=("OUT", "DEST"),
                   help="verify OUT, upload it to an rclone destination (remote:bucket/prefix) and check it there; "
                        "never overwrites; run again to finish an interrupted upload (record: --run-dir's _PUBLISHED.json)")
    return p


def resolve_settings(args: argparse.Namespace):
    from shard_pipeline.submit.settings import load_settings

    cli = {
        "ACCOUNT": args.account,
        "WORKER_PARTITION": args.worker_partition,
        "COUNTS_INDEX": args.counts_index,
        "MAX_TASKS": str(args.max_tasks) if args.max_tasks else None,
        "LICENSE": args.license,
        "PRESET": args.preset,
        "WORKER_MEM": args.mem,
        "TIME_LIMIT": args.time,
    }
    return load_settings(cli=cli, conf_path=args.conf, repo_root=REPO_ROOT)


def find_inputs(args: argparse.Namespace, settings) -> tuple[str, list]:
    from shard_pipeline.input.corpus import find_shards

    root = args.local_root or (settings.v4_root if args.corpus == "v4" else settings.v3_root)
    base_url = None
    if root is None:
        if args.corpus == "v4":
            raise UsageError("v4 needs --local-root (or V4_ROOT in the conf/preset): HPLT v4 has no public shard map")
        base_url = settings.v3_base_url
        subset = "sorted"
    else:
        root = Path(root)
        subset = root.name
    shards = find_shards(args.lang, corpus=args.corpus, local_root=root, base_url=base_url, wds=args.wds, sources=args.sources)
    return subset, shards


def parse_dp_ranks(spec: str) -> tuple[int, ...]:
    from shard_pipeline.stages.balance import parse_dp_ranks as parse

    return parse(spec)


def clean_policy(settings) -> dict:
    from shard_pipeline.stages.clean import CleanPolicy

    return CleanPolicy.from_conf(dict(settings.clean_values)).to_json()


def default_run_dir(args: argparse.Namespace, subset: str) -> Path:
    wds = (args.wds or "all").replace(",", "_")
    src = f"-{args.sources.replace(',', '_')}" if args.sources else ""
    return REPO_ROOT / "runs" / f"{args.corpus}-{subset}-{args.lang}-{wds}{src}"


def choose_executor(args: argparse.Namespace) -> str:
    return args.executor or ("slurm" if shutil.which("sbatch") else "local")


def task_budget(args: argparse.Namespace, settings, executor: str) -> int:
    """MAX_TASKS, and under Slurm also what the user's submit limit leaves (queued jobs counted)."""
    budget = settings.max_tasks
    if executor == "slurm" and settings.submit_limit:
        from shard_pipeline.submit.executors.slurm import queued_jobs

        room = settings.submit_limit - queued_jobs()
        if room < 4:
            raise UsageError(f"only {room} of SUBMIT_LIMIT={settings.submit_limit} queue slots are free; a run needs at least 4")
        budget = min(budget, room)
    return budget


def known_counts(settings, corpus: str, subset: str, lang: str, shards: Sequence) -> dict[int, int]:
    from shard_pipeline.input.counts_index import lookup

    if not settings.counts_index:
        return {}
    by_name = lookup(Path(settings.counts_index), corpus, subset, lang, shards)
    return {i: by_name[s.name] for i, s in enumerate(shards) if s.name in by_name}


def make_layout(args, settings, shards, known, executor, compressed_per_doc=None,
                text_per_doc=None) -> layout_mod.Layout:
    for name in ("shard_rows", "row_group_bytes", "shard_bytes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.val_permille <= 1000:
        raise UsageError("--val-permille must be in [0, 1000]")
    # Locally every task is a process start (~2 s of imports): a few tasks per core are enough.
    budget = task_budget(args, settings, executor) if executor == "slurm" else 4 * max(1, args.jobs) + 2
    return layout_mod.plan_layout(
        [s.size for s in shards],
        known,
        shard_rows=args.shard_rows,
        task_budget=budget,
        partition_mem=settings.worker_mem,
        job_mem=settings.worker_mem,
        time_limit=settings.time_limit,
        partition_tasks=args.partition_tasks,
        write_tasks=args.write_tasks,
        buckets=args.buckets,
        spill_bytes=args.spill_bytes,
        compressed_per_doc=compressed_per_doc,
        text_per_doc=text_per_doc,
        row_group_bytes=args.row_group_bytes,
    )


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


def describe(args, subset, shards, lay: layout_mod.Layout, executor: str, settings) -> str:
    lines = [
        f"hplt-shard {args.lang}  corpus {args.corpus}/{subset}  wds {args.wds or 'all'}"
        + (f"  sources {args.sources}" if args.sources else ""),
        f"input shards     {len(shards):,}  ({human_bytes(lay.compressed_bytes)} compressed, ~{human_bytes(lay.est_json_bytes)} JSON)",
        f"documents        ~{lay.est_docs:,}  ({lay.docs_known:,} known exactly, from the counts index or a "
        f"shard read to its end; {lay.inputs_unknown} of {len(shards)} shards estimated from bytes)",
        f"output shards    ~{lay.est_shards:,} of {args.shard_rows:,} rows (val {args.val_permille}/1000)"
        + ("; split layout dirs: train/ and validation/, one shard set each" if args.split_layout == "dirs" else ""),
        f"executor         {executor}",
        "job layout:",
        f"  partition  {lay.partition_tasks:>6} tasks  mem {lay.partition_mem:>5}  time {lay.partition_time}",
        f"  plan       {1:>6} task   mem {lay.plan_mem:>5}  time {lay.job_time}",
        f"  write      {lay.write_tasks:>6} tasks  mem {lay.write_mem:>5}  time {lay.write_time}",
        f"  finalize   {1:>6} task   mem {lay.job_mem:>5}  time {lay.job_time}  cpus {lay.finalize_cpus}",
        f"  queued at once: {lay.partition_tasks + lay.write_tasks + 2} (MAX_TASKS {settings.max_tasks}); array throttle %{lay.throttle}",
        f"id buckets       {lay.buckets:,}",
        f"sorted runs      ~{lay.sorted_runs:,} (text / spill budget {human_bytes(lay.spill_bytes)}), ~{lay.sections:,} "
        f"sections: plan mem {lay.plan_mem}, writer mem {lay.write_mem} (more partition memory means fewer runs)",
        f"read volume      {human_bytes(lay.compressed_bytes)} input + ~{human_bytes(lay.est_json_bytes // 2)} intermediate",
        f"write volume     ~{human_bytes(lay.est_json_bytes // 2)} intermediate + ~{human_bytes(lay.est_json_bytes // 6)} Parquet",
    ]
    return "\n".join(lines)


def git_state() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"], capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty}


def write_run_dir(run: RunDir, cfg: RunConfig, lay: layout_mod.Layout, shards, boundaries: dict, argv: Sequence[str],
                  settings, executor: str) -> None:
    run.create()
    write_json_atomic(run.config_json, cfg.to_json())
    write_json_atomic(run.buckets_json, boundaries)
    run.shard_list.write_text("".join(s.location + "\n" for s in shards))
    run.inventory.write_text("path\tsize\tmtime\n" + "".join(f"{s.location}\t{s.size}\t{s.mtime}\n" for s in shards))
    for t, pack in enumerate(lay.packing):
        write_json_atomic(run.task_file("partition", t), {"task": t, "inputs": list(pack)})
    write_json_atomic(run.run_json, {
        "run_format": RUN_FORMAT,
        "argv": list(argv),
        "config_sha256": cfg.content.sha256(),
        "code": git_state(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "cluster": os.environ.get("SLURM_CLUSTER_NAME") or platform.node(),
        "executor": executor,
        "layout": {k: v for k, v in asdict(lay).items() if k != "packing"},
        "settings": {k: str(v) for k, v in asdict(settings).items()},
        "submissions": [],
    })


def stage_tasks(lay: layout_mod.Layout) -> dict[str, list[int]]:
    return {"partition": list(range(lay.partition_tasks)), "plan": [0], "write": list(range(lay.write_tasks)), "finalize": [0]}


def run_lock(run: RunDir):
    """Held while this process runs or submits the run: a second resume of the same run is refused."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(run.root / ".run.lock"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"{run.root} is being run or resumed by another hplt-shard process") from None
    return _Held(lock)


class _Held:
    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.release()


def run_local(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], jobs: int, out: Path) -> int:
    import time as _time

    from shard_pipeline.submit.executors.local import StageFailed, run_all
    from shard_pipeline.run.rundir import read_json

    record = read_json(run.run_json)
    record["submissions"].append({"kind": "local", "submitted_at": _time.time(), "tasks": tasks, "jobs": []})
    write_json_atomic(run.run_json, record)
    try:
        run_all(sys.executable, run.root, tasks, jobs)
    except StageFailed as exc:
        release(out, run.root)
        print(f"hplt-shard: {exc}", file=sys.stderr)
        print(f"hplt-shard: run directory {run.root}; the previous {out} is untouched", file=sys.stderr)
        return 1
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    print(f"done: {manifest['rows']:,} documents in {len(manifest['shards'])} shards "
          f"(train {manifest['splits']['train']:,}, val {manifest['splits']['val']:,})")
    print(f"output:  {out}  (manifest {out / '_MANIFEST.json'})")
    print(f"run dir: {run.root}  (validation.json, logs/)")
    return 0


def submit_slurm(run: RunDir, cfg: RunConfig, t: dict[str, list[int]], settings, lang: str, kind: str) -> int:
    """Queue the stages that have tasks; each depends on every array chunk of the one before."""
    import time as _time

    from shard_pipeline.submit.executors.slurm import SlurmSettings, StageJobs, max_array_size, submit_chain
    from shard_pipeline.run.rundir import read_json

    ex = cfg.execution
    s = SlurmSettings(settings.worker_partition, settings.account, ex.python, settings.module_loads, f"hs-{lang}")
    throttle = max(1, min(len(t.get("partition", [])) + len(t.get("write", [])), settings.max_tasks))
    spec = {"partition": (ex.mem["partition"], ex.time["partition"], throttle), "plan": (ex.mem.get("plan", ex.mem["job"]), ex.time["job"], None),
            "write": (ex.mem["write"], ex.time["write"], throttle), "finalize": (ex.mem["job"], ex.time["job"], None)}
    stages = [StageJobs(stage, tuple(t[stage]), *spec[stage], cpus=ex.cpus.get(stage, 1))
              for stage in ("partition", "plan", "write", "finalize") if t.get(stage)]
    sub = submit_chain(s, run.root, stages, max_size=max_array_size())
    record = read_json(run.run_json)
    record["submissions"].append({"kind": kind, "submitted_at": _time.time(), "jobs": sub.jobs})
    write_json_atomic(run.run_json, record)
    for j in sub.jobs:
        print(f"queued {j['stage']:<9} job {j['job_id']}  array {j['array']}")
    print(f"run dir: {run.root}")
    print(f"watch:   squeue --me -n hs-{lang}-partition,hs-{lang}-plan,hs-{lang}-write,hs-{lang}-finalize")
    print(f"done when {run.done_marker} exists; output appears at {cfg.execution.out}")
    return 0


def resume(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Redo only what an interrupted run has not finished; same bytes as an uninterrupted run."""
    from shard_pipeline.submit.executors.slurm import queued_jobs_of
    from shard_pipeline.run.resume import ResumeRefused, changed_inputs, describe, plan_resume, run_job_ids
    from shard_pipeline.run.rundir import read_json

    run = RunDir(args.resume.resolve())
    if not run.config_json.exists():
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
    cfg = RunConfig.from_json(read_json(run.config_json))
    record = read_json(run.run_json)
    executor = args.executor or record["executor"]
    made_by = record.get("run_format", 1)
    if made_by != RUN_FORMAT:
        raise ResumeRefused(f"{run.root} was made by hplt-shard {record.get('code', {}).get('commit') or '(unknown commit)'} "
                            f"whose intermediate files have format {made_by}; this version reads format {RUN_FORMAT}. "
                            "Resume it with that version, or start a new run (inputs and OUT are untouched)")
    with run_lock(run):
        if shutil.which("squeue"):
            queued = queued_jobs_of(run_job_ids(run))
            if queued:
                raise ResumeRefused(f"jobs of this run are still queued or running: {', '.join(queued)}; "
                                    "wait for them or scancel them first")
        changed = changed_inputs(run, cfg)
        if changed:
            raise ResumeRefused("input shards changed since the run was submitted (shard_inventory.tsv): " + "; ".join(changed))
        rp = plan_resume(run)
        if rp.done:
            print(f"{run.root}: already done; output at {cfg.execution.out}")
            return 0
        print(f"resuming {run.root}:\n{describe(rp)}")
        if args.dry_run:
            print("dry run: nothing submitted")
            return 0
        out = Path(cfg.execution.out)
        claim(out, run.root)
        if executor == "local":
            return run_local(run, cfg, rp.tasks, args.jobs, out)
        settings = resolve_settings(args)
        return submit_slurm(run, cfg, rp.tasks, settings, cfg.content.lang, "resume")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return run_command(args, argv)
    except UserError as exc:  # conf, input, path and resume problems name file, line and reason
        print(f"hplt-shard: {exc}", file=sys.stderr)
        return exc.exit_code
    except (FileExistsError, ValueError) as exc:  # TODO(#12): raise UserError at the source instead
        print(f"hplt-shard: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.verify:
        from shard_pipeline.contract.verify import main as verify_main

        return verify_main([str(args.verify)])
    if args.publish:
        from shard_pipeline.submit.publish import main as publish_main

        return publish_main(Path(args.publish[0]), args.publish[1], args.run_dir)
    if args.status:
        from shard_pipeline.run.status import status_text

        run = RunDir(args.status.resolve())
        if not run.config_json.exists():
            raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
        print(status_text(run))
        return 0
    if args.resume:
        return resume(args, argv)
    if not args.lang:
        raise UsageError("LANG is required (e.g. eng_Latn)")
    settings = resolve_settings(args)
    if not settings.license:
        raise UsageError("no license: give --license SPDX or LICENSE in the conf (HPLT presets use CC0-1.0)")
    subset, shards = find_inputs(args, settings)
    executor = choose_executor(args)
    known = known_counts(settings, args.corpus, subset, args.lang, shards)
    from shard_pipeline.stages.buckets import choose_boundaries, sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    lay = make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample.compressed_per_doc,
                      sample.text_per_doc)
    if args.dry_run:
        print(describe(args, subset, shards, lay, executor, settings))
        print("dry run: nothing written, nothing submitted")
        return 0
    if args.out is None:
        raise UsageError("--out is required (the output folder)")
    out = args.out.resolve()
    check_replaceable(out)
    run = RunDir((args.run_dir or default_run_dir(args, subset)).resolve())
    if run.root.exists():
        raise UsageError(f"run directory {run.root} exists; use --resume {run.root} or move it away")
    if run.root == out or out in run.root.parents or run.root in out.parents:
        raise UsageError("--out and --run-dir must not contain each other")
    content = Content(
        corpus=args.corpus, subset=subset, lang=args.lang,
        dataset=args.dataset or f"hplt-{args.corpus}-{subset}-{args.lang}", version=args.dataset_version,
        license_spdx=settings.license, shard_rows=args.shard_rows, val_permille=args.val_permille,
        row_group_bytes=args.row_group_bytes, bad_records=args.bad_records,
        inputs=tuple(InputRef(s.name, s.location, s.size, s.mtime, s.source_id) for s in shards),
        dataset_card=args.dataset_card,
        clean=clean_policy(settings) if args.clean else None,
        shard_bytes=args.shard_bytes,
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks else (),
        split_layout=args.split_layout,
    )
    python = settings.python if executor == "slurm" else sys.executable
    execution = Execution(
        executor=executor, out=str(out), partition_tasks=lay.partition_tasks, write_tasks=lay.write_tasks,
        buckets=lay.buckets, spill_bytes=lay.spill_bytes, python=python,
        mem={"partition": lay.partition_mem, "plan": lay.plan_mem, "write": lay.write_mem, "job": lay.job_mem},
        time={"partition": lay.partition_time, "write": lay.write_time, "job": lay.job_time},
        cpus={"finalize": lay.finalize_cpus} if lay.finalize_cpus > 1 else {},
        counts_index=str(settings.counts_index) if settings.counts_index else None,
    )
    method, boundaries = choose_boundaries(sample.ids, lay.buckets)
    execution = Execution(**{**asdict(execution), "buckets": len(boundaries) + 1})
    cfg = RunConfig(content, execution)
    claim(out, run.root)
    write_run_dir(run, cfg, lay, shards, {"method": method, "boundaries": boundaries}, ["hplt-shard", *argv], settings, executor)
    print(f"config sha256 {content.sha256()}; {len(shards)} input shards; {lay.partition_tasks} partition / "
          f"{lay.write_tasks} write tasks; {len(boundaries) + 1} buckets ({method})", file=sys.stderr)
    with run_lock(run):
        if executor == "local":
            return run_local(run, cfg, stage_tasks(lay), args.jobs, out)
        return submit_slurm(run, cfg, stage_tasks(lay), settings, args.lang, "submit")


if __name__ == "__main__":
    sys.exit(main())
