"""Does a layout fit the partition? Checked before anything is queued, at --dry-run and at submit.

A job asking more than any node or MaxTime allows is not refused by every Slurm: it pends for ever (reason
PartitionConfig). `partition_limits` is the one caller of scontrol and sinfo; when either fails, the check is
skipped with a warning, never a refusal.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Mapping

from shard_pipeline import slurm
from shard_pipeline.errors import UsageError
from shard_pipeline.run.runconfig import StageResources
from shard_pipeline.units import parse_mem, plural, slurm_minutes

MIB = 1 << 20
TIMEOUT = 30


@dataclass(frozen=True)
class Node:
    cpus: int
    mem_mb: int  # RealMemory, MiB


@dataclass(frozen=True)
class PartitionLimits:
    name: str
    state: str  # UP, DOWN, DRAIN, INACTIVE
    max_time: str | None  # as Slurm prints it ([D-]HH:MM:SS); None: UNLIMITED
    max_mem_per_node_mb: int | None
    max_mem_per_cpu_mb: int | None
    max_cpus_per_node: int | None
    nodes: tuple[Node, ...]  # one entry per node configuration sinfo reports


class PartitionMissing(UsageError):
    """--partition names a partition the cluster does not have."""


def _number(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None  # UNLIMITED, NONE, 0 with a '+', ...


def parse_partition(text: str) -> dict[str, str]:
    """`scontrol show partition P -o`: one line of Key=Value fields."""
    return dict(re.findall(r"(\w+)=(\S*)", text))


def parse_nodes(text: str) -> tuple[Node, ...]:
    """`sinfo -p P -h -o "%c %m"`: CPUs and memory (MiB) per node configuration ('2 22900', '128+ 256000+')."""
    nodes = []
    for line in text.splitlines():
        parts = line.replace("+", "").split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            nodes.append(Node(int(parts[0]), int(parts[1])))
    return tuple(nodes)


def limits_of(name: str, partition_text: str, sinfo_text: str) -> PartitionLimits:
    f = parse_partition(partition_text)
    max_time = f.get("MaxTime")
    return PartitionLimits(name, f.get("State", "UP"), None if max_time in (None, "UNLIMITED", "NONE") else max_time,
                           _number(f.get("MaxMemPerNode")), _number(f.get("MaxMemPerCPU")),
                           _number(f.get("MaxCPUsPerNode")), parse_nodes(sinfo_text))


def _mem_text(mb: int) -> str:
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def stage_problems(stage: str, res: StageResources, units: int, lim: PartitionLimits) -> list[str]:
    """What keeps one stage's array task (`units` tasks of one core each when grouped) off every node."""
    out, where = [], f"partition {lim.name}"
    mem_mb = -(-parse_mem(res.mem) // MIB)
    caps = ([max(n.cpus for n in lim.nodes)] if lim.nodes else []) + ([lim.max_cpus_per_node] if lim.max_cpus_per_node else [])
    cpu_cap = min(caps, default=None)
    if cpu_cap is not None and res.cpus > cpu_cap:
        fix = f"--cpus-per-task {cpu_cap}" if units > 1 else "a --partition with bigger nodes"
        out.append(f"{stage} asks {res.cpus} cores per array task; the largest node of {where} has {cpu_cap}: use {fix}")
    mem_caps = [(max(n.mem_mb for n in lim.nodes), "the largest node")] if lim.nodes else []
    if lim.max_mem_per_node_mb:
        mem_caps.append((lim.max_mem_per_node_mb, "MaxMemPerNode"))
    if lim.max_mem_per_cpu_mb:
        mem_caps.append((lim.max_mem_per_cpu_mb * res.cpus, f"MaxMemPerCPU x {plural(res.cpus, 'core')}"))
    if mem_caps:
        cap, what = min(mem_caps)
        if mem_mb > cap:
            per_unit = cap // max(1, units)
            fix = (f"--mem {_mem_text(per_unit)} (per task; {units} tasks per array task), or fewer --cpus-per-task"
                   if units > 1 else f"--mem {_mem_text(cap)}")
            out.append(f"{stage} asks {res.mem} of memory per array task; {what} of {where} allows {_mem_text(cap)}: "
                       f"use {fix}, or a --partition with more memory per node")
    if lim.max_time is not None and slurm_minutes(res.time) > slurm_minutes(lim.max_time):
        out.append(f"{stage} asks --time {res.time}; {where} allows at most MaxTime={lim.max_time}: "
                   f"use --time {lim.max_time}")
    return out


def layout_problems(resources: Mapping[str, StageResources], lim: PartitionLimits) -> list[str]:
    """Every stage's problems with the partition, in stage order; [] when the layout can run there.
    A grouped stage's array task runs one unit per core (--cpus-per-task); the others run one."""
    from shard_pipeline.run.runconfig import GROUPED_STAGES

    return [p for stage, res in resources.items()
            for p in stage_problems(stage, res, res.cpus if stage in GROUPED_STAGES else 1, lim)]


Runner = Callable[..., subprocess.CompletedProcess]


def partition_limits(partition: str, run: Runner = subprocess.run) -> PartitionLimits | str:
    """The partition's limits, or why they could not be read (a warning: the check is skipped)."""
    texts = []
    for argv in (["scontrol", "show", "partition", partition, "-o"], ["sinfo", "-p", partition, "-h", "-o", "%c %m"]):
        a = slurm.call(argv, TIMEOUT, run)
        if not a.ran:
            return f"{a.why()}: the layout was not checked against partition {partition}"
        if not a.ok and "not found" in a.stderr + a.stdout:
            raise PartitionMissing(f"partition {partition!r} does not exist on this cluster ({a.why()}): "
                                   "give --partition (or WORKER_PARTITION in the conf) one that `sinfo -s` lists")
        if not a.ok:
            return (f"{' '.join(argv[:2])} failed ({a.stderr.strip() or a.returncode}): the layout was not "
                    f"checked against partition {partition}")
        texts.append(a.stdout)
    return limits_of(partition, *texts)


def check_layout(resources: Mapping[str, StageResources], partition: str, run: Runner = subprocess.run) -> str | None:
    """Refuse (exit 2) a layout some stage of which cannot run on `partition`; warn when it cannot be checked.
    Returns the line --dry-run prints about what was checked (None: not checked)."""
    lim = partition_limits(partition, run)
    if isinstance(lim, str):
        print(f"hplt-shard: warning: {lim}", file=sys.stderr)
        return None
    problems = layout_problems(resources, lim)
    if problems:
        raise UsageError("this layout cannot run on partition " + partition + " (its jobs would pend for ever, "
                         "reason PartitionConfig):\n  " + "\n  ".join(problems))
    if lim.state != "UP":
        print(f"hplt-shard: warning: partition {partition} is {lim.state}: jobs wait until it is UP again",
              file=sys.stderr)
    return fits_line(lim)


def fits_line(lim: PartitionLimits) -> str:
    """`partition small: every stage fits (largest node 2 CPUs, 22900M; MaxTime UNLIMITED)`."""
    node = max(lim.nodes, key=lambda n: (n.cpus, n.mem_mb), default=None)
    if node is None:
        return f"partition {lim.name}: sinfo lists no node, so cores and memory were not checked (MaxTime {lim.max_time or 'UNLIMITED'})"
    return (f"partition {lim.name}: every stage fits (largest node {node.cpus} CPUs, {_mem_text(node.mem_mb)}; "
            f"MaxTime {lim.max_time or 'UNLIMITED'})")


@dataclass(frozen=True)
class SubmitCap:
    """The cap on the user's submitted jobs (every array task counts) and where it was read."""

    limit: int
    source: str  # "MaxSubmitJobs of association root/tests" or "SUBMIT_LIMIT"
    account: str | None  # the account whose jobs count against it (None: all the user's jobs)


def assoc_max_submit(text: str, account: str) -> int | None:
    """MaxSubmitJobs of `account` in `sacctmgr -nP show assoc user=U format=account,maxsubmit` output
    (None: no row for it, or no limit set on it)."""
    for line in text.splitlines():
        name, _, limit = line.strip().partition("|")
        if name == account and limit.strip().isdigit():
            return int(limit)
    return None


def _sacctmgr(argv: list[str], run: Runner) -> str | None:
    """sacctmgr's output, or None where it cannot be run or fails (no accounting: the conf's cap holds)."""
    a = slurm.call(["sacctmgr", "-nP", *argv], TIMEOUT, run)
    return a.stdout if a.ok else None


def submit_cap(conf_limit: int | None, account: str | None, user: str, run: Runner = subprocess.run) -> SubmitCap | None:
    """The association's MaxSubmitJobs where sacctmgr reads it (as sbatch enforces it, per user and
    account), else the conf's SUBMIT_LIMIT, else None (no cap known)."""
    if account is None:
        default = _sacctmgr(["show", "user", user, "format=defaultaccount"], run)
        account = (default or "").strip().split("\n")[0].strip() or None
    text = _sacctmgr(["show", "assoc", f"user={user}", "format=account,maxsubmit"], run) if account else None
    limit = assoc_max_submit(text, account) if text is not None and account else None
    if limit is not None:
        return SubmitCap(limit, f"MaxSubmitJobs of association {user}/{account}", account)
    return SubmitCap(conf_limit, "SUBMIT_LIMIT", None) if conf_limit else None
