"""The task processes of a run that are alive now: a record per task in RUNDIR/live, checked in /proc.

Tasks may outlive their submitter (a closed SSH session, a SIGKILL): a resume must not start a second writer
of their files, and --status must call them running. So a task records its pid and start time (a reused pid
does not share it) and removes the record when it ends. Records of another host are Slurm nodes, left to
squeue, or, in a local run, tasks of another login node sharing the run dir. Under the local executor a task
also dies with the thread that started it (prctl PR_SET_PDEATHSIG), which waits for it.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from shard_pipeline.files import write_json_atomic

DIE_WITH_ENV = "HPLT_SHARD_DIE_WITH"
PR_SET_PDEATHSIG = 1
EXIT_ORPHAN = 70  # the task found its starter gone before it could tie itself to it: it did nothing


@dataclass(frozen=True)
class LiveTask:
    stage: str
    task: int
    pid: int
    start: int  # clock ticks after boot (/proc/PID/stat field 22): pid and start name one process
    pgid: int
    host: str

    def describe(self) -> str:
        stop = f"kill -- -{self.pgid}" if self.pgid == self.pid else f"kill {self.pid}"
        return f"{self.stage} task {self.task} (pid {self.pid}; to stop it: {stop})"


def live_dir(root: Path) -> Path:
    return Path(root) / "live"


def proc_stat(pid: int) -> tuple[int, int] | None:
    """(process group, start time) of a live process, None when there is no such process (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[2]), int(fields[19])


def _group_alive(pgid: int, since: int) -> bool:
    """Some process of group `pgid` started at or after `since` still runs (a child the task left behind)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[0] == pgid and st[1] >= since:
                return True
    return False


def is_elsewhere(t: LiveTask) -> bool:
    """Recorded by another host: this one cannot see its process (`LiveScan.elsewhere` says whose it is)."""
    return t.host != socket.gethostname()


def is_alive(t: LiveTask) -> bool:
    if is_elsewhere(t):
        return False
    st = proc_stat(t.pid)
    if st is not None and st[1] == t.start:
        return True
    return t.pgid == t.pid and _group_alive(t.pgid, t.start)  # its own group: what it started counts too


@dataclass(frozen=True)
class Hidden:
    """A record this user cannot read: its task (another user's) may run."""
    path: Path
    why: str
    stage: str
    task: int


@dataclass(frozen=True)
class LiveScan:
    """One read of RUNDIR/live: the records read, and those this user cannot read."""
    records: list[tuple[Path, LiveTask]]
    hidden: list[Hidden]

    def alive(self) -> list[LiveTask]:
        """The run's tasks whose processes run now, on this host."""
        return [t for _, t in self.records if is_alive(t)]

    def elsewhere(self) -> list[tuple[Path, LiveTask]]:
        """The records of another host, whose processes this one cannot see."""
        return [(p, t) for p, t in self.records if is_elsewhere(t)]

    def running(self, local: bool) -> set[tuple[str, int]]:
        """(stage, task) of every task that runs or may run: live, hidden, and in a `local` run another host's."""
        away = [t for _, t in self.elsewhere()] if local else []
        return {(t.stage, t.task) for t in [*self.alive(), *away]} | {(h.stage, h.task) for h in self.hidden}

    def killed(self) -> set[tuple[str, int]]:
        """(stage, task) of every record on this host whose process is gone: killed with its submitter."""
        return {(t.stage, t.task) for _, t in self.records if is_stale(t)}


def elsewhere_step(away: list[tuple[Path, LiveTask]]) -> str:
    """The one text for tasks a local run recorded on another host (a resume refuses with it, --status gives it).
    A unit records itself in the run's and its language's live/: one process is one task here."""
    from shard_pipeline.commands import command
    from shard_pipeline.units import plural

    tasks: dict[tuple[str, int, int], tuple[LiveTask, list[Path]]] = {}
    for p, t in away:
        tasks.setdefault((t.host, t.pid, t.start), (t, []))[1].append(p)
    hosts = sorted({t.host for t, _ in tasks.values()})
    named = [f"{t.stage} task {t.task} on {t.host} (pid {t.pid})" for t, _ in tasks.values()]
    return (f"{plural(len(tasks), 'task')} of this run {'was' if len(tasks) == 1 else 'were'} started on "
            f"{'another host' if len(hosts) == 1 else 'other hosts'} and may still run there: "
            + "; ".join(named[:5]) + ("; ..." if len(named) > 5 else "")
            + ". This host cannot see those processes, and a second writer would corrupt their files. Resume from "
            f"{hosts[0] if len(hosts) == 1 else 'those hosts'}, which checks them itself; or, once none runs there, "
            f"remove their records ({command('rm', *(p for p, _ in away))}), then resume again")


def is_stale(t: LiveTask) -> bool:
    """A record of this host whose process is gone (another host's: `LiveScan.elsewhere`)."""
    return not is_elsewhere(t) and not is_alive(t)


def scan(root: Path) -> LiveScan:
    """Read every record of the run once; one this user cannot read (umask 077 in a shared run dir) is hidden."""
    records, hidden = [], []
    try:
        paths = sorted(live_dir(root).glob("*.json"))
    except OSError:
        paths = []
    for p in paths:
        try:
            t = LiveTask(**json.loads(p.read_text()))
        except FileNotFoundError:
            continue  # it ended meanwhile
        except OSError as exc:
            if m := re.fullmatch(r"([a-z]+)-(\d+)\.\d+\.json", p.name):
                hidden.append(Hidden(p, exc.strerror or str(exc), m[1], int(m[2])))
            continue
        except (ValueError, TypeError):
            continue  # foreign: a record is written atomically, so never half-written
        records.append((p, t))
    return LiveScan(records, hidden)


def prune(root: Path, elsewhere: bool = False) -> None:
    """Remove the records of processes gone, and with `elsewhere` other hosts' (Slurm tasks no longer queued)."""
    for p, t in scan(root).records:
        if is_stale(t) or (elsewhere and is_elsewhere(t)):
            p.unlink(missing_ok=True)


@contextlib.contextmanager
def recorded(root: Path, stage: str, task: int) -> Iterator[None]:
    """This process is task `task` of `stage` in run `root` while the block runs."""
    me = os.getpid()
    st = proc_stat(me)
    if st is None:  # no /proc: nothing to record, nothing can be checked
        yield
        return
    path = live_dir(root) / f"{stage}-{task:05d}.{me}.json"
    try:
        write_json_atomic(path, asdict(LiveTask(stage, task, me, st[1], os.getpgid(0), socket.gethostname())))
    except OSError as exc:  # a full disk: the task fails on its own writes, with their message
        print(f"hplt-shard: warning: this task could not record itself as running: {exc}", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def die_with_parent() -> None:
    """Under the local executor: SIGKILL this task when the process that started it dies."""
    want = os.environ.get(DIE_WITH_ENV)
    if not want or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        print(f"hplt-shard: warning: prctl(PR_SET_PDEATHSIG) failed (errno {ctypes.get_errno()}): this task "
              "would outlive its executor", file=sys.stderr, flush=True)
        return
    if os.getppid() != int(want):  # the starter died before the line above: run nothing
        print(f"hplt-shard: the process that started this task ({want}) is gone; not running", file=sys.stderr, flush=True)
        os._exit(EXIT_ORPHAN)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a task this process starts and owns: it dies when this process dies."""
    return {**env, DIE_WITH_ENV: str(os.getpid())}
