#!/usr/bin/env python3
"""hplt-shard benchmark: the floor, datatrove 0.10 and hplt-shard on the same files and cores.

    .venv/bin/python bench/run.py --docs 120000 --text-bytes 3000 --shards 8 --workdir bench/work

See bench/README.md. Prints a table with the ratios and writes the raw figures as JSON.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import Pool
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import gen  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
from shard_pipeline.run.registry import STAGE_NAMES as STAGES  # noqa: E402


# ----------------------------------------------------------------------------------------------
# process-tree memory sampling


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                s = f.read()
            ppid = int(s[s.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _status_bytes(pid: int, field: bytes) -> int:
    """A kB field of /proc/<pid>/status, in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _anon(pid: int) -> int:
    """RssAnon: the process's own memory, without file pages it has mapped (mmap'd spill files)."""
    return _status_bytes(pid, b"RssAnon:")


def _pss(pid: int) -> int:
    """Pss: the process's share of every page it maps. Summed over a tree of forks it counts a page
    the forks share once (RSS counts it in each), so it is the tree's real memory."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """utime + stime of a live process, in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        fields = s[s.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def _hwm(pid: int) -> int:
    return _status_bytes(pid, b"VmHWM:")


def _layout_options(opts) -> list[str]:
    """The hplt-shard options a benchmark run passes through (input selection, memory, layout)."""
    argv = []
    if opts.wds:
        argv += ["--wds", opts.wds]
    if opts.mem:
        argv += ["--mem", opts.mem]
    for k in ("partition_tasks", "write_tasks", "buckets", "spill_bytes"):
        v = getattr(opts, k)
        if v:
            argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


class _Poller:
    """A background thread that runs self._loop until the with-block ends."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


class TreeSampler(_Poller):
    """Peak of the summed RSS of a set of root processes and all their descendants."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.roots: set[int] = set()
        self.peak = 0
        self.peak_anon = 0  # summed RssAnon
        self.peak_pss = 0  # summed Pss
        self.task_anon: dict[int, int] = {}  # root pid -> its peak RssAnon (with descendants)
        self.cpu: dict[int, float] = {}  # every pid seen under a root -> its last sampled CPU seconds
        super().__init__()

    def tree_cpu_s(self) -> float:
        """CPU seconds of every process seen in the trees, as last sampled (up to one interval short
        per process): for pools whose workers are not reaped, so `wait4` does not count them."""
        return sum(self.cpu.values())

    def _loop(self) -> None:
        while not self._stop.is_set():
            roots = list(self.roots)
            if roots:
                kids = _children_map()
                seen, total, total_anon, total_pss = set(), 0, 0, 0
                for root in roots:
                    stack, anon = [root], 0
                    while stack:
                        p = stack.pop()
                        if p in seen:
                            continue
                        seen.add(p)
                        total += _rss(p)
                        total_pss += _pss(p)
                        anon += _anon(p)
                        self.cpu[p] = max(self.cpu.get(p, 0.0), _cpu_s(p))
                        stack.extend(kids.get(p, ()))
                    total_anon += anon
                    self.task_anon[root] = max(self.task_anon.get(root, 0), anon)
                self.peak = max(self.peak, total)
                self.peak_anon = max(self.peak_anon, total_anon)
                self.peak_pss = max(self.peak_pss, total_pss)
            self._stop.wait(self.interval)


# ----------------------------------------------------------------------------------------------
# the floor: zstd stream + orjson.loads per line + sha256 of the text, one process per core


def _floor_file(path: str) -> tuple[int, int, float]:
    import orjson
    import zstandard

    t0 = time.process_time()
    loads, sha256 = orjson.loads, hashlib.sha256
    docs = nbytes = 0
    pending = b""
    with open(path, "rb") as fh:
        r = zstandard.ZstdDecompressor().stream_reader(fh, read_size=1 << 20, read_across_frames=True)
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            nbytes += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                sha256(loads(line)["text"].encode()).digest()
                docs += 1
    if pending:
        sha256(loads(pending)["text"].encode()).digest()
        docs += 1
    return docs, nbytes, time.process_time() - t0


def run_floor(files: list[Path], cores: int) -> dict:
    t0 = time.perf_counter()
    with Pool(cores) as pool:
        res = pool.map(_floor_file, [str(f) for f in files], chunksize=1)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "docs": sum(r[0] for r in res), "json_bytes": sum(r[1] for r in res),
            "cpu_s": sum(r[2] for r in res)}


# ----------------------------------------------------------------------------------------------
# datatrove 0.10: JsonlReader -> ParquetWriter, LocalPipelineExecutor(tasks = workers = cores)

DT_SCRIPT = HERE / "dt_run.py"
REFERENCE: list[dict | None] = [None]  # --reference-manifest: the manifest every hplt-shard output must equal
DT_PYTHON = [sys.executable]  # --dt-python: datatrove in a venv of its own (its pins are not the project's)
CLI_REPO = [REPO]  # --cli-repo: the checkout whose ./hplt-shard --cli runs (e.g. a `git archive` of a base revision)


def datatrove_version() -> str | None:
    r = subprocess.run([DT_PYTHON[0], "-c", "import importlib.metadata as m; print(m.version('datatrove'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def run_datatrove(corpus_dir: Path, work: Path, cores: int, expect_docs: int | None = None) -> dict:
    out, logs = work / "dt-out", work / "dt-logs"
    for d in (out, logs):
        shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    with TreeSampler() as ts:
        p = subprocess.Popen([DT_PYTHON[0], str(DT_SCRIPT), str(corpus_dir), str(out), str(logs), str(cores)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ts.roots.add(p.pid)
        _, ru = os.wait4(p.pid, 0)[1:]
        wall = time.perf_counter() - t0
        stdout, stderr = p.communicate()
    if p.returncode not in (0, None) and "DT_WALL" not in stdout:
        raise RuntimeError(f"datatrove failed:\n{stderr[-3000:]}")
    import pyarrow.parquet as pq

    files = sorted(out.rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if expect_docs is not None and rows != expect_docs:
        raise RuntimeError(f"datatrove wrote {rows:,} rows, the corpus has {expect_docs:,} documents")
    columns = sorted(pq.ParquetFile(files[0]).schema_arrow.names) if files else []
    inner = float(stdout.split("DT_WALL")[1].split()[0])
    steps = json.loads(stdout.split("DT_STEPS", 1)[1].strip().splitlines()[0]) if "DT_STEPS" in stdout else {}
    out_bytes = sum(f.stat().st_size for f in out.rglob("*.parquet"))
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "executor_wall_s": inner, "docs": rows, "peak_tree_rss": ts.peak, "peak_tree_pss": ts.peak_pss,
            "cpu_s": max(ru.ru_utime + ru.ru_stime, ts.tree_cpu_s()), "parquet_bytes": out_bytes, "columns": columns,
            "steps_s": steps}


# ----------------------------------------------------------------------------------------------
# hplt-shard: the CLI's own submitter (cli.main), then the stages in the local executor's pool
# shape (ThreadPoolExecutor(jobs) over `python stages/<stage>.py RUNDIR --task i`), each task
# reaped with wait4 for its own rusage.


def _prepare_run(argv: list[str]) -> dict:
    """Run ./hplt-shard's submitter in-process, stopping where the local executor would start."""
    import shard_pipeline.submit.cli as cli
    import shard_pipeline.submit.executors.local as local

    captured: dict = {}

    def capture(run, cfg, tasks, jobs, out):  # tasks: {stage: [task ids]}
        captured.update(run=run, cfg=cfg, tasks={k: list(v) for k, v in tasks.items()}, out=out)
        return 0

    real = local.run_local
    local.run_local = capture
    try:
        rc = cli.main(argv)
    finally:
        local.run_local = real
    if rc != 0 or not captured:
        raise RuntimeError(f"hplt-shard submitter failed (rc {rc})")
    return captured


def _run_task(python: str, stage: str, rundir: Path, task: int, sampler: TreeSampler, group: bool = False,
              fork: bool = True) -> dict:
    """One task process (or, `group`, one array task's C units, forked from it as under Slurm); wait4 counts
    the CPU of the units it reaped, and the sampler sums the RSS of the whole tree."""
    from shard_pipeline.worker.taskcmd import task_argv
    from shard_pipeline.submit.executors import task_env

    log = rundir / "logs" / stage / f"local_{'group' if group else ''}{task}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**task_env(), "HPLT_SHARD_FORK_UNITS": "1" if fork else "0"}
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        p = subprocess.Popen(task_argv(stage, rundir, task, group=group, python=python), stdout=f,
                             stderr=subprocess.STDOUT, env=env)
        sampler.roots.add(p.pid)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    sampler.roots.discard(p.pid)
    return {"task": task, "rc": p.returncode, "wall_s": time.perf_counter() - t0,
            "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss": ru.ru_maxrss * 1024,
            "max_anon_sampled": sampler.task_anon.get(p.pid, 0), "log": str(log)}


def byte_compile(checkouts: set[Path]) -> list[Path]:
    """Byte-compile each checkout under test, as its first run on a user's machine leaves it.

    pip byte-compiles datatrove when it installs it; an editable install is compiled by its first
    run, unless PYTHONDONTWRITEBYTECODE is set (as in some sandboxes), and then every run compiles
    the project's ~50 modules again (~0.05-0.1 s of a run) where datatrove's do not.
    """
    done = []
    for repo in sorted(checkouts):
        dirs = [str(d) for d in (repo / "shard_pipeline", repo / "stages") if d.is_dir()]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, stdout=subprocess.DEVNULL)
        done.append(repo)
    return done


def run_hplt_cli(out: Path, rundir: Path, argv: list[str]) -> dict:
    """The whole `./hplt-shard ... --executor local` as one process, as a user runs it: wall, CPU of the
    process and every unit it reaped (wait4), peak summed RSS of its tree. No per-stage split."""
    t0, t_epoch = time.perf_counter(), time.time()
    with TreeSampler() as ts, open(rundir.with_name(rundir.name + ".cli.log"), "wb") as log:
        p = subprocess.Popen([str(CLI_REPO[0] / "hplt-shard"), *argv], stdout=log, stderr=subprocess.STDOUT)
        ts.roots.add(p.pid)
        _, status, ru = os.wait4(p.pid, 0)
    total = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"hplt-shard exited {os.waitstatus_to_exitcode(status)}: see {log.name}")
    stages, first = stages_from_exits(rundir)
    stages["partition"]["peak_tree_rss"] = ts.peak  # the whole tree's peak, under the first stage
    lay = argparse.Namespace(partition_tasks=None, write_tasks=None, buckets=None, spill_bytes=None)
    res = _hplt_figures(rundir, out, lay, first - t_epoch, total, stages, cleanup=True)
    res["cli_cpu_s"] = ru.ru_utime + ru.ru_stime  # the submitter and every unit it reaped
    res["peak_tree_pss"] = ts.peak_pss
    return res


def stages_from_exits(rundir: Path) -> tuple[dict, float]:
    """Per stage, from the exit record of every unit that ended well (worker/group.py, run/outcome.py read_exit):
    wall from the first start to the last end, CPU summed, the largest unit's peak RSS; and when the first unit
    started."""
    from shard_pipeline.run.outcome import read_exit

    spans: dict[str, list] = {s: [] for s in STAGES}
    for record in rundir.glob("logs/**/*.exit.json"):
        e = read_exit(record.with_name(record.name.removesuffix(".exit.json") + ".log"))
        stage = e.label.split()[0] if e is not None else ""
        if e is not None and e.returncode == 0 and stage in spans:
            spans[stage].append((e.start, e.end, e.cpu_s, int(e.max_rss_mib) << 20))
    stages = {s: {"wall_s": (max(e for _, e, _, _ in v) - min(a for a, _, _, _ in v)) if v else 0.0, "tasks": len(v),
                  "cpu_s": sum(c for _, _, c, _ in v), "max_task_rss": max((r for *_, r in v), default=0),
                  "peak_tree_rss": 0, "max_task_anon": 0, "peak_tree_anon": 0} for s, v in spans.items()}
    return stages, min((a for v in spans.values() for a, *_ in v), default=0.0)


def run_hplt_local(corpus_root: Path, work: Path, cores: int, opts: argparse.Namespace, tag: str) -> dict:
    out, rundir = work / f"hs-out-{tag}", work / f"hs-run-{tag}"
    for d in (out, rundir):
        shutil.rmtree(d, ignore_errors=True)
    argv = ["eng_Latn", "--corpus", "v4", "--local-root", str(corpus_root), "--out", str(out), "--run-dir", str(rundir),
            "--executor", "local", "--license", "CC0-1.0", "--shard-rows", str(opts.shard_rows), "--jobs", str(cores),
            "--counts-index", str(work / "counts-index")]
    argv += _layout_options(opts)
    if opts.cpus_per_task:
        argv += ["--cpus-per-task", str(opts.cpus_per_task)]
    if getattr(opts, "whole_cli", False):  # --also cli: the stages from the units' exit records
        return run_hplt_cli(out, rundir, argv)
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    cap = _prepare_run(argv)
    submit_s = time.perf_counter() - t0
    tasks = cap["tasks"]
    cfg = cap["cfg"]
    ex = (next(iter(cfg.values())) if isinstance(cfg, dict) else cfg).execution  # run_local gets {lang: cfg}
    lay = argparse.Namespace(partition_tasks=ex.partition_tasks, write_tasks=ex.write_tasks, buckets=ex.buckets,
                             spill_bytes=ex.spill_bytes)
    python = sys.executable  # what the local executor runs its tasks with
    cpus = opts.cpus_per_task or 1
    stages = {}
    for stage in STAGES:
        t0 = time.perf_counter()
        with TreeSampler() as ts, ThreadPoolExecutor(max_workers=max(1, cores // cpus)) as pool:
            if cpus > 1 and stage in ("partition", "write"):  # one process per array task, C units forked
                groups = sorted({t // cpus for t in tasks[stage]})
                results = list(pool.map(lambda g: _run_task(python, stage, rundir, g, ts, True, opts.fork), groups))
            else:
                results = list(pool.map(lambda t: _run_task(python, stage, rundir, t, ts), tasks[stage]))
        wall = time.perf_counter() - t0
        bad = [r for r in results if r["rc"] != 0]
        if bad:
            raise RuntimeError(f"{stage} failed: " + "; ".join(
                f"task {r['task']}: {Path(r['log']).read_text()[-1500:]}" for r in bad))
        stages[stage] = {"wall_s": wall, "tasks": len(results), "cpu_s": sum(r["cpu_s"] for r in results),
                         "max_task_rss": max(r["maxrss"] for r in results), "peak_tree_rss": ts.peak,
                         "max_task_anon": max(r["max_anon_sampled"] for r in results), "peak_tree_anon": ts.peak_anon,
                         "task_wall_s": [round(r["wall_s"], 3) for r in results],
                         "task_rss": [r["maxrss"] for r in results]}
    total = time.perf_counter() - t_all
    return _hplt_figures(rundir, out, lay, submit_s, total, stages, cleanup=not opts.keep)


def shard_digests(manifest: dict) -> list[tuple[str, int, str]]:
    """What a manifest says of the bytes: every shard's name, rows and sha256."""
    return [(s["name"], s["rows"], s["sha256"]) for s in manifest["shards"]]


def reference_mismatch(manifest: dict, reference: dict) -> str | None:
    """None when the output's shards are the reference's byte for byte (by their sha256), else what differs."""
    got, want = shard_digests(manifest), shard_digests(reference)
    if got == want:
        return None
    diff = [f"{g} != {w}" for g, w in zip(got, want) if g != w][:3]
    return f"{len(got)} shards against the reference's {len(want)}; first differences: {diff}"


def _hplt_figures(rundir: Path, out: Path, lay, submit_s: float, total: float, stages: dict, cleanup: bool) -> dict:
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    if REFERENCE[0] is not None and (why := reference_mismatch(manifest, REFERENCE[0])):
        raise RuntimeError(f"{out}: not the reference output ({why}); kept for inspection")
    json_bytes = comp = 0
    spill = 0
    for f in sorted((rundir / "partition").glob("task-*.receipt.json")):
        r = json.loads(f.read_text())
        json_bytes += sum(i["json_bytes"] for i in r["inputs"])
        comp += sum(i["compressed_bytes"] for i in r["inputs"])
        spill += r["spill_bytes"]
    parquet = sum(f.stat().st_size for f in out.glob("*.parquet"))
    check = subprocess.run([str(REPO / "hplt-shard"), "--verify", str(out)], capture_output=True, text=True)
    if check.returncode != 0:  # no figure from an output that was not checked
        raise RuntimeError(f"hplt-shard --verify {out} failed:\n{check.stdout[-2000:]}{check.stderr[-2000:]}")
    res = {"docs": manifest["rows"], "verified": True, "reference_equal": REFERENCE[0] is not None,
           "shards": len(manifest["shards"]), "json_bytes": json_bytes,
           "compressed_bytes": comp, "spill_bytes": spill, "parquet_bytes": parquet,
           "layout": {"partition_tasks": lay.partition_tasks, "write_tasks": lay.write_tasks, "buckets": lay.buckets,
                      "spill_budget": lay.spill_bytes},
           "submit_s": submit_s, "total_s": total, "stages": stages,
           "sections_bytes": (rundir / "sections.arrow").stat().st_size if (rundir / "sections.arrow").exists() else None}
    if cleanup:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(rundir, ignore_errors=True)
        claim = out.with_name(out.name + ".hplt-shard-claim")
        claim.unlink(missing_ok=True)
    return res


# ----------------------------------------------------------------------------------------------
# hplt-shard through Slurm: the real CLI submits; stages are watched in /proc and squeue.


class StageWatch(_Poller):
    """Per-stage first/last time seen, per-process VmHWM and summed RSS of the run's task processes."""

    def __init__(self, rundir: Path, interval: float = 0.2):
        self.rundir = str(rundir)
        self.interval = interval
        self.info: dict[str, dict] = {s: {"first": None, "last": None, "max_task_rss": 0, "peak_tree_rss": 0,
                                          "pids": set()} for s in STAGES}
        self._cmd: dict[int, str | None] = {}
        super().__init__()

    def _stage_of(self, pid: int) -> str | None:
        if pid not in self._cmd:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                argv = []
            stage = None
            if self.rundir in argv:
                for a, b in zip(argv, argv[1:]):  # by hand (stages/<s>.py) or as the executors start it
                    for s in STAGES:
                        if a.endswith(f"stages/{s}.py") or (a == "shard_pipeline.worker.task" and b == s):
                            stage = s
            self._cmd[pid] = stage
        return self._cmd[pid]

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            sums = {s: 0 for s in STAGES}
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                pid = int(d)
                st = self._stage_of(pid)
                if st is None:
                    continue
                rss = _rss(pid)
                if not rss:
                    continue
                i = self.info[st]
                i["first"] = i["first"] or now
                i["last"] = now
                i["pids"].add(pid)
                i["max_task_rss"] = max(i["max_task_rss"], _hwm(pid))
                sums[st] += rss
            for s in STAGES:
                self.info[s]["peak_tree_rss"] = max(self.info[s]["peak_tree_rss"], sums[s])
            self._stop.wait(self.interval)


def run_hplt_slurm(corpus_root: Path, work: Path, opts: argparse.Namespace, tag: str) -> dict:
    out, rundir = work / f"hs-out-{tag}", work / f"hs-run-{tag}"
    for d in (out, rundir):
        shutil.rmtree(d, ignore_errors=True)
    argv = [str(REPO / "hplt-shard"), "eng_Latn", "--corpus", "v4", "--local-root", str(corpus_root), "--out", str(out),
            "--run-dir", str(rundir), "--executor", "slurm", "--conf", str(opts.conf), "--license", "CC0-1.0",
            "--shard-rows", str(opts.shard_rows), "--counts-index", str(work / "counts-index")]
    argv += _layout_options(opts)
    with StageWatch(rundir) as w:
        t_all = time.time()
        sub = subprocess.run(argv, capture_output=True, text=True)
        submit_s = time.time() - t_all
        if sub.returncode != 0:
            raise RuntimeError(f"submit failed: {sub.stderr}")
        print(sub.stdout, file=sys.stderr)
        while not (rundir / "DONE").exists():
            q = subprocess.run(["squeue", "-h", "-o", "%i %T %r", "-n",
                                ",".join(f"hs-eng_Latn-{s}" for s in STAGES)], capture_output=True, text=True).stdout
            if "DependencyNeverSatisfied" in q or (not q.strip() and not (rundir / "DONE").exists()
                                                   and time.time() - t_all > 30):
                time.sleep(3)
                if not (rundir / "DONE").exists():
                    raise RuntimeError(f"slurm chain stopped without DONE; squeue: {q!r}")
            time.sleep(0.5)
        total = time.time() - t_all
    run_json = json.loads((rundir / "run.json").read_text())
    lay = argparse.Namespace(**{k: run_json["layout"][k] for k in ("partition_tasks", "write_tasks", "buckets",
                                                                   "spill_bytes")})
    stages = {}
    for s in STAGES:
        i = w.info[s]
        stages[s] = {"wall_s": (i["last"] - i["first"]) if i["first"] else None, "tasks": len(i["pids"]),
                     "start_s": (i["first"] - t_all) if i["first"] else None,
                     "max_task_rss": i["max_task_rss"], "peak_tree_rss": i["peak_tree_rss"]}
    res = _hplt_figures(rundir, out, lay, submit_s, total, stages, cleanup=not opts.keep)
    res["executor"] = "slurm"
    res["jobs"] = run_json.get("submissions")
    return res


# ----------------------------------------------------------------------------------------------
# report


def mb(x: float) -> float:
    return x / 1e6


def machine() -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = int(open("/proc/meminfo").readline().split()[1]) * 1024
    vers = {"python": platform.python_version()}
    for mod in ("pyarrow", "zstandard", "orjson", "numpy"):
        try:
            vers[mod] = __import__(mod).__version__
        except Exception:
            vers[mod] = None
    vers["datatrove"] = datatrove_version()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    vers["hplt-shard"] = head.stdout.strip() + ("+dirty" if dirty else "")
    df = shutil.disk_usage(str(HERE))
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_bytes": mem, "disk_total_bytes": df.total,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "versions": vers,
            "kernel": platform.release()}


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(res: dict, cores: int) -> str:
    L = []
    fl, dt, hs = res.get("floor"), res.get("datatrove"), res.get("hplt")
    jb = res["corpus"]["json_bytes"]
    docs = res["corpus"]["docs"]
    L.append(f"corpus: {docs:,} docs, {mb(jb):.0f} MB JSON, {mb(res['corpus']['compressed_bytes']):.0f} MB zstd, "
             f"{res['corpus']['files']} files; {cores} cores; repeats {res['repeat']} (medians); "
             f"load avg (1 min) {min(l[0] for l in res['loadavg']):.1f}-{max(l[0] for l in res['loadavg']):.1f}")
    if hs:
        L.append("hplt-shard outputs checked: rows, --verify" + (", shards equal to --reference-manifest"
                                                              if all(h.get("reference_equal") for h in hs) else ""))
    L.append(f"{'run':<28}{'wall s':>9}{'docs/s':>10}{'MB/s JSON':>11}{'MB/s/core':>11}{'peak RSS MB':>13}")

    def row(name, wall, rss=None, tasks=None, d=docs, b=jb):
        c = min(cores, tasks) if tasks else cores
        L.append(f"{name:<28}{wall:>9.2f}{d / wall:>10,.0f}{mb(b) / wall:>11.1f}{mb(b) / wall / c:>11.1f}"
                 + (f"{mb(rss):>13.0f}" if rss else f"{'':>13}"))

    if fl:
        row("floor (zstd+orjson+sha256)", med(fl, "wall_s"))
        L[-1] += f"   cpu {med(fl, 'cpu_s'):.2f} s"
    if dt:
        row("datatrove 0.10 local", med(dt, "wall_s"), max(r["peak_tree_rss"] for r in dt))
        L[-1] += f"   cpu {med(dt, 'cpu_s'):.2f} s, columns {','.join(dt[0].get('columns', []))}"
        for name in dt[0].get("steps_s", {}):
            total = statistics.median(r["steps_s"].get(name, 0.0) for r in dt)
            L.append(f"  {name.encode('ascii', 'ignore').decode().strip(' -'):<26}{total:>9.2f}   (task-seconds, datatrove's own step timer)")
    if hs:
        row("hplt-shard whole run", med(hs, "total_s"), max(max(s["peak_tree_rss"] for s in r["stages"].values()) for r in hs))
        L.append(f"  {'submitter':<26}{med(hs, 'submit_s'):>9.2f}")
        for s in STAGES:
            walls = [r["stages"][s]["wall_s"] for r in hs]
            w = statistics.median(walls)
            rs = max(r["stages"][s]["peak_tree_rss"] for r in hs)
            tr = max(r["stages"][s]["max_task_rss"] for r in hs)
            t = hs[0]["stages"][s]["tasks"]
            if not w:  # --cli of a revision whose single jobs left no unit exit record
                L.append(f"  {s}: no figures (no unit exit record)")
                continue
            row(f"  {s} ({t} tasks)", w, rs, tasks=t)
            cpu = statistics.median(r["stages"][s]["cpu_s"] for r in hs)
            L[-1] += f"   cpu {cpu:.2f} s, max task {mb(tr):.0f} MB"
            an = max(r["stages"][s].get("max_task_anon", 0) for r in hs)
            if an:
                L[-1] += f" (anon {mb(an):.0f})"
    pss = [(name, max(r.get("peak_tree_pss", 0) for r in runs)) for name, runs in (("datatrove", dt), ("hplt-shard", hs))
           if runs and any(r.get("peak_tree_pss") for r in runs)]
    if pss:  # RSS summed over forks counts their shared pages once per fork; PSS splits them
        L.append("peak memory, summed PSS of the whole process tree: "
                 + ", ".join(f"{name} {mb(v):.0f} MB" for name, v in pss))
    L.append("")
    if hs and dt:
        r1 = (docs / med(hs, "total_s")) / (docs / med(dt, "wall_s"))
        per = sorted(d["wall_s"] / h["total_s"] for d, h in zip(dt, hs))
        L.append(f"hplt-shard docs/s / datatrove docs/s       = {r1:.2f}   (issue #23: >= 1.5)  "
                 f"   [per repeat {', '.join(f'{x:.2f}' for x in per)}]")
        cpu_h = statistics.median(sum(st["cpu_s"] for st in r["stages"].values()) for r in hs)
        L.append(f"  by CPU time: datatrove {med(dt, 'cpu_s'):.2f} s / hplt-shard stages {cpu_h:.2f} s = "
                 f"{med(dt, 'cpu_s') / cpu_h:.2f}")
    if hs and fl:
        r2 = med(fl, "wall_s") / med(hs, "total_s")
        per = sorted(f["wall_s"] / h["total_s"] for f, h in zip(fl, hs))
        L.append(f"hplt-shard whole run / floor throughput    = {r2:.2f}   (issue #23: >= 0.45 at 600 k docs)"
                 f"   [per repeat {', '.join(f'{x:.2f}' for x in per)}]")
        pw = statistics.median(r["stages"]["partition"]["wall_s"] for r in hs)
        pt = hs[0]["stages"]["partition"]["tasks"]
        per_core_p = jb / pw / min(cores, pt)
        per_core_f = jb / med(fl, "wall_s") / cores
        L.append(f"partition per core / floor per core        = {per_core_p / per_core_f:.2f}   (by wall)"
                 f"   [{mb(per_core_p):.1f} vs {mb(per_core_f):.1f} MB/s/core]")
        cpu_p = jb / statistics.median(r["stages"]["partition"]["cpu_s"] for r in hs)
        cpu_f = jb / med(fl, "cpu_s")
        L.append(f"partition per CPU-s / floor per CPU-s      = {cpu_p / cpu_f:.2f}   (issue #14: >= 0.8)"
                 f"   [{mb(cpu_p):.1f} vs {mb(cpu_f):.1f} MB/CPU-s]")
    return "\n".join(L)


def _variants(opts: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """--also c1,fresh: hplt-shard with one process per task (C = 1), or C units started as fresh interpreters."""
    out = []
    for name in filter(None, (opts.also or "").split(",")):
        v = argparse.Namespace(**vars(opts))
        if name == "cli":
            v.whole_cli = True
        elif name == "c1":
            v.cpus_per_task = None
        elif name == "fresh":
            v.fork = False
        else:
            raise SystemExit(f"--also {name}: one of c1, fresh, cli")
        out.append((name, v))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=120_000)
    ap.add_argument("--text-bytes", type=int, default=3000)
    ap.add_argument("--shards", type=int, default=8, help="input shards (named 10_1..10_N) unless --names")
    ap.add_argument("--names", help="comma-separated input shard names (e.g. wds-selectable 10_1,9_1,8_1)")
    ap.add_argument("--parts", type=int, default=1, help="generate each shard as N frames in parallel (big shards)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-root", type=Path, help="use this corpus root (holding eng_Latn/) instead of generating")
    ap.add_argument("--workdir", type=Path, default=HERE / "work")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="repeat every measurement; medians are reported")
    ap.add_argument("--only", default="floor,datatrove,hplt", help="subset of floor,datatrove,hplt")
    ap.add_argument("--wds", help="pass --wds to hplt-shard (and restrict floor/datatrove to those files)")
    ap.add_argument("--shard-rows", type=int, default=None,
                    help="rows per output shard (default: balanced, docs / (3 x cores) rounded up, so the write stage "
                         "has equal shards for every core; 20,000 for 120,000 docs on 2 cores)")
    ap.add_argument("--mem", help="hplt-shard --mem (partition memory; spill budget = mem/8)")
    ap.add_argument("--partition-tasks", type=int)
    ap.add_argument("--write-tasks", type=int)
    ap.add_argument("--buckets", type=int)
    ap.add_argument("--spill-bytes", type=int)
    ap.add_argument("--executor", choices=("local", "slurm"), default="local")
    ap.add_argument("--conf", type=Path, help="conf for --executor slurm (PRESET=local, PYTHON=..., WORKER_MEM=...)")
    ap.add_argument("--cpus-per-task", type=int, default=None,
                    help="hplt-shard --cpus-per-task C: partition/write run as array tasks of C units (worker/group.py)")
    ap.add_argument("--no-fork", dest="fork", action="store_false",
                    help="with --cpus-per-task: start every unit as a fresh interpreter (HPLT_SHARD_FORK_UNITS=0)")
    ap.add_argument("--dt-python", default=sys.executable,
                    help="the python whose environment has datatrove (e.g. /work/dt-venv/bin/python)")
    ap.add_argument("--cli", dest="whole_cli", action="store_true",
                    help="measure hplt-shard as the whole ./hplt-shard --executor local command a user runs (its stages "
                         "from the units' exit records) instead of the stages run one by one in the executor's pool shape")
    ap.add_argument("--cli-repo", type=Path, default=REPO,
                    help="with --cli or --also cli: run this checkout's ./hplt-shard (a base revision's `git archive`), "
                         "checked by this one's --verify and --reference-manifest")
    ap.add_argument("--also", help="c1,fresh,cli: also run hplt-shard with C = 1, with fresh unit processes, or as the "
                                   "whole ./hplt-shard --executor local command (the local executor's own groups), interleaved")
    ap.add_argument("--reference-manifest", type=Path,
                    help="a _MANIFEST.json of the same corpus and --shard-rows written by a known-good revision: every "
                         "hplt-shard output's shards (names, rows, sha256) must equal it, or the run stops")
    ap.add_argument("--keep", action="store_true", help="keep hplt-shard's output and run dir")
    ap.add_argument("--json", type=Path, help="raw figures (default WORKDIR/results-<tag>.json)")
    ap.add_argument("--tag", default=None)
    opts = ap.parse_args()
    DT_PYTHON[0] = opts.dt_python
    CLI_REPO[0] = opts.cli_repo.resolve()
    if opts.reference_manifest:
        REFERENCE[0] = json.loads(opts.reference_manifest.read_text())

    work = opts.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    names = opts.names.split(",") if opts.names else [f"10_{k + 1}" for k in range(opts.shards)]
    if opts.shard_rows is None:
        opts.shard_rows = max(1, -(-opts.docs // (3 * opts.cores)))
    t0 = time.perf_counter()
    root = (opts.corpus_root.resolve() if opts.corpus_root
            else gen.ensure_corpus(work, opts.docs, names, opts.text_bytes, opts.seed, opts.parts, opts.cores))
    gen_s = time.perf_counter() - t0
    from shard_pipeline.input.corpus import find_shards

    files = [Path(s.location) for s in find_shards("eng_Latn", corpus="v4", local_root=root, wds=opts.wds)]
    tag = opts.tag or f"{root.name}{'-wds' + opts.wds if opts.wds else ''}-{opts.executor}"
    only = set(opts.only.split(","))
    res: dict = {"machine": machine(), "args": {k: str(v) for k, v in vars(opts).items()}, "repeat": opts.repeat,
                 "corpus": {"root": str(root), "files": len(files), "compressed_bytes": sum(f.stat().st_size for f in files),
                            "generate_s": gen_s}}
    dt_ok = "datatrove" in only and datatrove_version() is not None
    if "datatrove" in only and not dt_ok:
        res["datatrove_skipped"] = "datatrove is not importable in this venv"
    dt_src = work / f"dt-src-{tag}"
    if dt_ok:  # datatrove reads a folder: link exactly the selected files
        shutil.rmtree(dt_src, ignore_errors=True)
        dt_src.mkdir()
        for f in files:
            (dt_src / f.name).symlink_to(f)
    for k in ("floor", "datatrove", "hplt"):
        res[k] = [] if (k in only and (k != "datatrove" or dt_ok)) else None
    res["loadavg"] = []
    res["byte_compiled"] = [str(r) for r in byte_compile({REPO, CLI_REPO[0]})]
    for rep in range(opts.repeat):
        res["loadavg"].append(os.getloadavg())
        if res["floor"] is not None:
            res["floor"].append(run_floor(files, opts.cores))
            print(f"[{rep}] floor {res['floor'][-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
        if res["datatrove"] is not None:
            expect = (res["floor"][0]["docs"] if res["floor"] else None)
            res["datatrove"].append(run_datatrove(dt_src, work, opts.cores, expect))
            print(f"[{rep}] datatrove {res['datatrove'][-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
        if res["hplt"] is not None:
            if opts.executor == "slurm":
                res["hplt"].append(run_hplt_slurm(root, work, opts, f"{tag}-{rep}"))
            else:
                res["hplt"].append(run_hplt_local(root, work, opts.cores, opts, f"{tag}-{rep}"))
            h = res["hplt"][-1]
            print(f"[{rep}] hplt-shard {h['total_s']:.2f} s  "
                  + " ".join(f"{s}={h['stages'][s]['wall_s'] or 0:.2f}" for s in STAGES), file=sys.stderr, flush=True)
            for name, variant in _variants(opts):  # other hplt-shard shapes, interleaved with the main one
                v = run_hplt_local(root, work, opts.cores, variant, f"{tag}-{name}-{rep}")
                res.setdefault("hplt_variants", {}).setdefault(name, []).append(v)
                print(f"[{rep}] hplt-shard ({name}) {v['total_s']:.2f} s", file=sys.stderr, flush=True)
    res["loadavg"].append(os.getloadavg())
    shutil.rmtree(dt_src, ignore_errors=True)
    ref = (res["hplt"] or [None])[0] or {}
    fl = (res["floor"] or [None])[0] or {}
    res["corpus"]["docs"] = ref.get("docs") or fl.get("docs") or opts.docs
    res["corpus"]["json_bytes"] = ref.get("json_bytes") or fl.get("json_bytes") or 0
    if res["hplt"] and res["floor"]:
        assert all(h["docs"] == res["floor"][0]["docs"] for h in res["hplt"]), "hplt-shard and the floor saw different docs"
    if res["datatrove"] and res["floor"]:
        assert res["datatrove"][0]["docs"] == res["floor"][0]["docs"], "datatrove and the floor saw different docs"
    text = report(res, opts.cores)
    for name, runs in (res.get("hplt_variants") or {}).items():
        cpu = ", ".join(f"{s} {statistics.median(r['stages'][s]['cpu_s'] for r in runs):.2f}" for s in STAGES)
        walls = ", ".join(f"{r['total_s']:.2f}" for r in runs)
        total = statistics.median(sum(st["cpu_s"] for st in r["stages"].values()) for r in runs)
        stage_walls = ", ".join(f"{s} {statistics.median(r['stages'][s]['wall_s'] for r in runs):.2f}" for s in STAGES)
        text += (f"\nhplt-shard ({name}): whole run {med(runs, 'total_s'):.2f} s (repeats {walls}); "
                 f"before the first unit {med(runs, 'submit_s'):.2f} s; stage walls: {stage_walls}; "
                 f"cpu {total:.2f} s (stages: {cpu})"
                 + (f"; whole tree {med(runs, 'cli_cpu_s'):.2f} s" if name == "cli" else ""))
        if res["datatrove"]:  # the same repeats' datatrove runs, interleaved with these
            per = sorted(d["wall_s"] / v["total_s"] for d, v in zip(res["datatrove"], runs))
            text += (f"\n  docs/s / datatrove docs/s = {med(res['datatrove'], 'wall_s') / med(runs, 'total_s'):.2f}"
                     f"   [per repeat {', '.join(f'{x:.2f}' for x in per)}]")
        if res["floor"]:
            text += f"\n  whole run / floor throughput = {med(res['floor'], 'wall_s') / med(runs, 'total_s'):.2f}"
    res["table"] = text
    out = opts.json or work / f"results-{tag}.json"
    out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(text)
    print(f"raw figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
