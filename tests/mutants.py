"""Mutants of the code that keeps each invariant: does the fast tier notice when that code is gone?

Each mutant removes or weakens one check (a file, an exact snippet found there once, its
replacement, the invariant it breaks). This script applies them one at a time to a scratch copy
of the checkout (the working tree is never written), runs the fast tier there
(`pytest -x -q -m "not slow"`: tests/invariants/ first, the whole tier only if those
pass) and reports, per mutant, the test that killed it or that it survived. A surviving mutant
is an invariant the fast tier does not guard: add a fast test that fails without that code
(tests/invariants/), then run the mutant again.

    .venv/bin/python -m tests.mutants                 # every mutant: about an hour on 2 cores
    .venv/bin/python -m tests.mutants NAME ...        # only these mutants
    .venv/bin/python -m tests.mutants --list          # the mutants and their invariants
    .venv/bin/python -m tests.mutants --tests tests/invariants/test_invariants_done.py NAME
                                                      # only some test files: quick, while writing a test

It first runs the unchanged copy (skip with --no-baseline): a tier that fails there would make
every mutant look killed. Exit status: 0 when every mutant was killed, 1 when one survived or
broke the run (a collection error, a timeout), 2 when the baseline fails. It is not part of the
test run; tests/project/test_mutants.py checks, in the fast tier, that every snippet is still in the
source exactly once, so this list cannot silently fall behind the code.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]

# The invariants the mutants break: docs/DESIGN.md's table ("Invariants and where they hold"), and
# the rules of "Submission, faults and resume" that keep a resumed run's output right.
INVARIANTS = {
    "memory": "a partition task's memory is bounded whatever its input shard's size",
    "scratch-files": "scratch files grow with tasks, not tasks x buckets",
    "read-once": "each text byte is written to scratch once and read back once",
    "order": "the order is right for any id distribution",
    "conservation": "read = kept + quarantined",
    "out-old-or-new": "OUT is always the complete old or the complete new version",
    "same-bytes": "same documents, same bytes",
    "done-rule": "a task is done only when its receipt agrees with its files; what follows a redone task is redone",
    "resume-refuses-early": "a resume refuses at once what its finalize would refuse",
    "next-step": "a failure a resume cannot go past (a bad record, a repeated id, a broken or short input) names a new run",
    "short-input": "an input the counts index knows as larger is refused, before anything is written",
    "release-checksum": "a local input whose release MD5 differs never reaches OUT",
    "staging-place": "the dry-run and the submit look for a language's staging folder in the same place",
    "index-floor": "a counts-index row below the bytes-per-document floor is impossible, never projected",
    "typed-records": "a record of a wrong type is one named refusal or a redo, never a traceback",
    "status-from-records": "--status reads how a task ended and what it used from its typed records, never its log's text",
    "skipped-is-a-consequence": "a unit skipped for an unfinished earlier stage never makes its language failed: "
                                "the phase follows the cause",
}


@dataclass(frozen=True)
class Mutant:
    name: str
    invariant: str  # a key of INVARIANTS
    file: str  # relative to the checkout
    snippet: str  # exact source text, found exactly once in `file`
    replacement: str

    def apply(self, source: str) -> str:
        if source.count(self.snippet) != 1:
            raise ValueError(f"{self.name}: the snippet is in {self.file} {source.count(self.snippet)} times, not once")
        return source.replace(self.snippet, self.replacement)


PLAN = "shard_pipeline/stages/plan.py"
PARTITION = "shard_pipeline/stages/partition.py"
WRITE = "shard_pipeline/stages/write.py"
FINALIZE = "shard_pipeline/stages/finalize.py"
COLLECT = "shard_pipeline/stages/collect.py"
RECORDS = "shard_pipeline/run/records.py"
OUTCOME = "shard_pipeline/run/outcome.py"
INDEX_CHECK = "shard_pipeline/input/index_check.py"
REGISTRY = "shard_pipeline/run/registry.py"
RESUMING = "shard_pipeline/submit/resuming.py"
LANDING = "shard_pipeline/worker/landing.py"
REPLACE = "shard_pipeline/contract/replace.py"
RULEBOOK = "shard_pipeline/run/rulebook.py"
SWAP = "shard_pipeline/contract/swap.py"
SPILL = "shard_pipeline/stages/spill.py"

MUTANTS: tuple[Mutant, ...] = (
    # read = kept + quarantined: partition counts, plan proves, finalize records
    Mutant("plan-skips-read-kept-quarantined", "conservation", PLAN,
           'if inp.read != inp.kept + q:', "if False:"),
    Mutant("plan-skips-input-read-twice", "conservation", PLAN,
           'if inp.index in seen:', "if False:"),
    Mutant("plan-skips-input-never-read", "conservation", PLAN,
           "    if missing:\n", "    if False:\n"),
    Mutant("plan-skips-kept-vs-spilled", "conservation", PLAN,
           'if kept != rc.rows:', "if False:"),
    Mutant("plan-skips-index-vs-receipt", "conservation", PLAN,
           'if sum(index.column("rows").to_pylist()) != rc.rows:', "if False:"),
    Mutant("validation-omits-conservation", "conservation", FINALIZE,
           "conservation=plan.conservation,", "conservation=None,"),
    # the done rule (run/registry.py), which --status and --resume share
    Mutant("done-ignores-size", "done-rule", REGISTRY,
           "if st.st_size != stamp.bytes:", "if False:"),
    Mutant("done-ignores-mtime", "done-rule", REGISTRY,
           "if st.st_mtime_ns != stamp.mtime_ns:", "if False:"),
    Mutant("done-trusts-any-ctime", "done-rule", REGISTRY,
           "if st.st_ctime_ns == stamp.ctime_ns:", "if True:"),
    Mutant("done-ignores-ctime", "done-rule", REGISTRY,
           "if st.st_ctime_ns == stamp.ctime_ns:", "if False:"),
    Mutant("done-skips-sha256", "done-rule", REGISTRY,
           "if file_sha256(path) != sha256:", "if False:"),
    Mutant("done-without-index", "done-rule", REGISTRY,
           "return (file_matches(run.spill_index(task), rc.index_stamp, rc.index_sha256, state.rehash, state.touched)\n"
           "            or file_matches(", "return (file_matches("),
    Mutant("done-plan-without-sections", "done-rule", REGISTRY,
           "return file_matches(state.run.sections, plan.sections_stamp, plan.sections_sha256, state.rehash, state.touched)",
           "return None"),
    Mutant("done-write-ignores-its-shards", "done-rule", REGISTRY,
           "        if why:\n            return why\n", "        if False:\n            return why\n"),
    Mutant("done-counts-a-record-of-another-config", "done-rule", RECORDS,
           "    if made.config_sha256 != expect.config_sha256:\n", "    if False:\n"),
    Mutant("done-counts-a-record-of-another-code", "done-rule", RECORDS,
           "    if not any_code and made.code_version != expect.code_version:\n", "    if False:\n"),
    Mutant("landing-waits-on-receipt-files", "done-rule", LANDING,
           "if (p := before.problem(state, t)) is not None}", "if (p := \"no receipt\") and not run.write_receipt(t).exists()}"),
    Mutant("resume-keeps-what-follows-a-redone-task", "done-rule", "shard_pipeline/run/resume.py",
           'why = f"{upstream} redone" if upstream else stage.problem(state, t)', "why = stage.problem(state, t)"),
    # finalize: nothing reaches OUT but every planned shard as its writer recorded it
    Mutant("finalize-skips-changed-inputs", "out-old-or-new", FINALIZE,
           "if changed:  # the output would describe", "if False:  # the output would describe"),
    Mutant("finalize-skips-stray-files", "out-old-or-new", COLLECT,
           "    if stray:\n", "    if False:\n"),
    Mutant("finalize-skips-shard-hash", "out-old-or-new", COLLECT,
           "if f.bytes != s.bytes or f.sha256 != s.sha256:", "if False:"),
    Mutant("finalize-skips-receipt-vs-plan", "out-old-or-new", COLLECT,
           "if s.name != p.name or s.rows != stop - start:", "if False:"),
    Mutant("finalize-keeps-damaged-receipts", "out-old-or-new", COLLECT,
           "run.write_receipt(task).unlink(missing_ok=True)", "pass"),
    Mutant("finalize-skips-plan-config", "out-old-or-new", FINALIZE,
           "plan = load_record(run.plan_json, Plan, made_here(cfg.content.sha256()), step=REDO_STEP)",
           'plan = load_record(run.plan_json, Plan, made_here(read_json(run.plan_json)["config_sha256"]), step=REDO_STEP)'),
    Mutant("finalize-replaces-a-newer-output", "out-old-or-new", RULEBOOK,
           'if theirs.get("config_sha256") == ctx.cfg.content.sha256():', "if True:"),
    Mutant("write-into-out-not-staging", "out-old-or-new", WRITE,
           'out_tmp = staging_dir(Path(cfg.execution.out), str(run.root), "move it away, then --resume this run")',
           "out_tmp = Path(cfg.execution.out)"),
    Mutant("swap-skips-replaceable-check", "out-old-or-new", SWAP,
           "held = check_replaceable(out, new_run=False)  # the run's own finalize", "held = None  #"),
    Mutant("swap-fallback-leaves-out-absent", "out-old-or-new", SWAP,
           "os.rename(old, out)  # OUT back as it was", "pass  # OUT back as it was"),
    Mutant("staging-takes-a-foreign-tmp", "out-old-or-new", REPLACE,
           "if mine or (owner.startswith(WRITE_SHARDS_OWNER) and abandoned_write_shards(made_by)):", "if True:"),
    # a resume says at once what finalize would refuse
    Mutant("resume-skips-finalize-refusals", "resume-refuses-early", RESUMING,
           "        resume_preflight(dirs[l], cfgs[l], l in left.planning, root)\n", "        pass\n"),
    Mutant("resume-skips-newer-output", "resume-refuses-early", RULEBOOK,
           "Rule(\"newer-output\", frozenset({RESUME, FINALIZE})", "Rule(\"newer-output\", frozenset({FINALIZE})"),
    Mutant("resume-skips-out-replaceable", "resume-refuses-early", RULEBOOK,
           "        check_out_for_resume(ctx.out, str(ctx.run_root))\n", "        pass\n"),
    Mutant("resume-skips-changed-inputs", "resume-refuses-early", RESUMING,
           "    if changed:\n        fresh =", "    if False:\n        fresh ="),
    # the next step after a failure comes from the kind of its outcome record
    Mutant("short-input-is-a-plain-failure", "next-step", OUTCOME,
           "    if isinstance(exc, InputShorterThanIndex):\n        return Kind.SHORT_INPUT\n", ""),
    Mutant("repeated-id-is-a-plain-failure", "next-step", OUTCOME,
           "    if isinstance(exc, RepeatedId):\n        return Kind.REPEATED_ID\n", ""),
    Mutant("resume-goes-past-a-repeated-id", "next-step", OUTCOME,
           "NEEDS_NEW_RUN = frozenset({Kind.BAD_RECORD, Kind.REPEATED_ID,", "NEEDS_NEW_RUN = frozenset({Kind.BAD_RECORD,"),
    # --status reads a task's end and figures from its outcome record
    Mutant("outcome-without-figures", "status-from-records", OUTCOME,
           '{**asdict(outcome), "kind": outcome.kind.value}', '{**asdict(outcome), "kind": outcome.kind.value, "figures": None}'),
    Mutant("failed-line-from-the-log", "status-from-records", "shard_pipeline/run/stage_status.py",
           "    elif rec is not None:\n        said =", "    elif False:\n        said ="),
    # --status describes the last attempt only: an earlier attempt's outcome is never shown as its end
    Mutant("status-shows-an-earlier-attempts-outcome", "status-from-records", "shard_pipeline/run/stage_status.py",
           "if rec is not None and ended is not None and rec.ended < ended.start:", "if False:"),
    # a unit skipped for an unfinished earlier stage (UPSTREAM) is a consequence: the phase follows its cause
    Mutant("skipped-unit-counts-as-failed", "skipped-is-a-consequence", "shard_pipeline/run/stage_status.py",
           "sum(len(s.causes()) for s in statuses),", "sum(len(s.failed) for s in statuses),"),
    Mutant("unit-runs-with-its-last-outcome", "status-from-records", "shard_pipeline/worker/landing.py",
           "        outcome.forget(run, stage, task)  # this attempt's end is not known yet, whichever way it goes\n", ""),
    Mutant("finalize-keeps-its-last-outcome", "status-from-records", "shard_pipeline/worker/landing.py",
           '    outcome.forget(run, "finalize", 0)\n', ""),
    # an input shorter than the counts index knows it is refused
    Mutant("short-input-by-bytes-passes", "short-input", INDEX_CHECK,
           "        if inp.size is not None and row.bytes > inp.size:\n", "        if False:\n"),
    Mutant("short-input-by-documents-passes", "short-input", INDEX_CHECK,
           "        elif docs is not None and docs < row.docs and", "        elif False and"),
    Mutant("release-checksum-never-checked", "release-checksum", "shard_pipeline/input/reader.py",
           "                hashes.check(line)\n", "                pass\n"),
    Mutant("staging-checked-where-the-manifest-says", "staging-place", "shard_pipeline/submit/launch.py",
           "of_a_root=out_is_root))", "of_a_root=False))"),
    Mutant("run-json-read-unchecked", "typed-records", "shard_pipeline/run/run_json.py",
           "    if (why := wrong_field(record, SHAPE)) is not None:\n", "    if False:\n"),
    Mutant("index-floor-gone", "index-floor", "shard_pipeline/input/counts_index.py",
           "    if _below_floor(size, docs):\n        return (", "    if False:\n        return ("),
    # memory: a partition task spills when its buffered text reaches the budget
    Mutant("partition-scan-never-spills", "memory", PARTITION,
           "            if fill + buf.annotation_bytes >= budget:\n", "            if False:\n"),
    Mutant("partition-python-loop-never-spills", "memory", PARTITION,
           "        if buf.full(budget):\n", "        if False:\n"),
    # scratch: sections only for buckets a run has rows of
    Mutant("spill-writes-empty-sections", "scratch-files", SPILL,
           "            if hi == lo:\n                continue\n", ""),
    # each batch decompressed once, each bucket ordered once per writer
    Mutant("cursor-decompresses-every-time", "read-once", SPILL,
           "        if i != self._index:\n", "        if True:\n"),
    Mutant("writer-new-cursor-per-row-group", "read-once", WRITE,
           "if (b, k) not in self._cursors:", "if True:"),
    Mutant("writer-orders-a-bucket-per-piece", "read-once", WRITE,
           "if self._order is None or self._order.bucket != b:", "if True:"),
    # order
    Mutant("partition-run-unsorted", "order", PARTITION,
           "order = sorted(range(len(ids)), key=ids.__getitem__)", "order = list(range(len(ids)))"),
    Mutant("bucket-order-unsorted", "order", "shard_pipeline/stages/order.py",
           "perm = pc.sort_indices(ids).to_numpy()", "perm = np.arange(len(ids))"),
    Mutant("plan-sections-by-task-first", "order", PLAN,
           '[("bucket", "ascending"), ("task", "ascending"), ("run", "ascending")]',
           '[("task", "ascending"), ("bucket", "ascending"), ("run", "ascending")]'),
    Mutant("repeated-ids-pass", "order", "shard_pipeline/stages/order.py",
           "if not pc.any(same).as_py():", "if True:"),
    # same documents, same bytes
    Mutant("config-hash-covers-paths", "same-bytes", "shard_pipeline/run/runconfig.py",
           "inputs=[[i.source_id, i.size] for i in self.inputs]", "inputs=[[i.location, i.size] for i in self.inputs]"),
    Mutant("config-hash-ignores-shard-rows", "same-bytes", "shard_pipeline/run/runconfig.py",
           'if f.name != "annotations" or self.annotations}',
           'if f.name != "shard_rows" and (f.name != "annotations" or self.annotations)}'),
    Mutant("cluster-index-per-shard", "same-bytes", WRITE,
           "pa.array(np.arange(first + a, first + b, dtype=np.int64)),", "pa.array(np.arange(a, b, dtype=np.int64)),"),
    Mutant("val-split-off-by-one", "same-bytes", PARTITION,
           "return heads % 1000 < val_permille", "return heads % 1000 <= val_permille"),
)


def scratch_copy(dest: Path) -> Path:
    """The checkout as it is now (uncommitted changes included), without its venv or caches, committed
    to a git repository of its own (the checkout's is never written)."""
    ignore = shutil.ignore_patterns(".git", ".venv", "venv", "__pycache__", ".pytest_cache", "*.egg-info", "build",
                                    "runs", "counts-index")
    shutil.copytree(CHECKOUT, dest, ignore=ignore, symlinks=True)
    git = ["git", "-C", str(dest), "-c", "user.name=mutants", "-c", "user.email=mutants@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the checkout, copied for mutants"]):
        subprocess.run([*git, *args], check=True, capture_output=True)  # tests ask git for the commit
    return dest


def _write(path: Path, text: str) -> None:
    """Write `text` and drop the file's cached bytecode: a pyc is trusted by mtime in seconds and size,
    so a mutant of the same length written within the second would run the old code."""
    path.write_text(text, encoding="utf-8")
    Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)


@dataclass(frozen=True)
class Outcome:
    verdict: str  # killed, survived, broken (collection error, usage), timeout
    by: str  # the first failing test, or what broke
    seconds: float


FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
FIRST = "invariants/test_*.py"  # run before the whole tier
SELF_CHECK = "tests/project/test_mutants.py"  # fails on every mutant (its snippet is gone): it would hide what survives


def run_tier(copy: Path, tests: list[str], timeout: float) -> Outcome:
    """The fast tier (or only `tests`) in the copy, stopped at its first failure."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", "-rfE",
            "--deselect", SELF_CHECK, *tests]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome("timeout", f"over {timeout:.0f} s", time.monotonic() - started)
    seconds = time.monotonic() - started
    found = FAILED_LINE.search(proc.stdout)
    if proc.returncode == 0:
        return Outcome("survived", "", seconds)
    if proc.returncode == 1 and found:
        return Outcome("killed", found.group(1), seconds)
    tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    return Outcome("broken", f"pytest exit {proc.returncode}: {tail}", seconds)


def run_mutant(copy: Path, tests: list[str], timeout: float) -> Outcome:
    """`tests`, or else the invariants' own tests first (most mutants die there in seconds), then the whole tier."""
    first_files = sorted(str(p.relative_to(copy)) for p in (copy / "tests").glob(FIRST))
    if tests or not first_files:
        return run_tier(copy, tests, timeout)
    first = run_tier(copy, first_files, timeout)
    if first.verdict != "survived":
        return first
    rest = run_tier(copy, [], timeout)
    return Outcome(rest.verdict, rest.by, first.seconds + rest.seconds)


def imports_from(copy: Path) -> Path:
    """Where the copy's interpreter finds shard_pipeline: it must be the copy, not the editable install."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", "import shard_pipeline; print(shard_pipeline.__file__)"], cwd=copy,
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    return Path(out).resolve()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="mutants to run (default: all)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--tests", action="append", default=[], help="test files or ids to run (default: the fast tier)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run of the tier")
    p.add_argument("--no-baseline", action="store_true", help="skip the run of the unchanged copy")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # the scratch copy is removed
    if a.list:
        for m in MUTANTS:
            print(f"{m.name:<44} {m.invariant:<22} {m.file}")
        return 0
    unknown = set(a.names) - {m.name for m in MUTANTS}
    if unknown:
        p.error(f"no mutant {', '.join(sorted(unknown))} (see --list)")
    chosen = [m for m in MUTANTS if not a.names or m.name in a.names]
    with tempfile.TemporaryDirectory(prefix="hplt-shard-mutants-") as scratch:
        copy = scratch_copy(Path(scratch) / "checkout")
        if not imports_from(copy).is_relative_to(copy):
            print(f"the copy imports shard_pipeline from outside {copy}: nothing would be mutated", file=sys.stderr)
            return 2
        if not a.no_baseline:
            base = run_tier(copy, a.tests, a.timeout)
            print(f"baseline: {base.verdict} in {base.seconds:.0f} s {base.by}", flush=True)
            if base.verdict != "survived":
                print("the unchanged copy does not pass: fix that first", file=sys.stderr)
                return 2
        results = []
        for m in chosen:
            path = copy / m.file
            original = path.read_text(encoding="utf-8")
            _write(path, m.apply(original))
            try:
                outcome = run_mutant(copy, a.tests, a.timeout)
            finally:
                _write(path, original)
            results.append((m, outcome))
            print(f"{outcome.verdict:<9} {m.name:<44} {outcome.seconds:5.0f} s  {outcome.by}", flush=True)
    survivors = [m.name for m, o in results if o.verdict != "killed"]
    print(f"\n{len(results) - len(survivors)} of {len(results)} mutants killed"
          + (f"; not killed: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
