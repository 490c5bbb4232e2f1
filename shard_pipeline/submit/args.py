"""The command line of ./hplt-shard: its options, their defaults and help, and its one product, the typed
Request (nothing below the CLI sees argparse)."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from shard_pipeline.contract.rules import DEFAULT_ROW_GROUP_BYTES

DEFAULT_SHARD_ROWS = 1_000_000


def path_arg(value: str) -> Path:
    """A path option's value; an empty one (`--out ""`, an unset shell variable) is refused, not taken as the
    current folder, which a run would replace whole."""
    return Path(nonempty(value))


def nonempty(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path: give a folder (an unset shell variable?)")
    return value


def build_parser() -> argparse.ArgumentParser:
    return command_line()[0]


class _QuietParser(argparse.ArgumentParser):
    """Raises ValueError where argparse would print the usage and exit: for command lines the user
    did not type now (run.json's, recorded by another version), whose errors are not theirs to read."""

    def error(self, message: str):  # type: ignore[override]
        raise ValueError(message)


def status_exit_codes() -> str:
    """`0 done; 1 failed or interrupted; ...`: --status's exit code of each phase (runstate.PHASE_EXIT)."""
    from shard_pipeline.run.runstate import PHASE_EXIT

    by_code: dict[int, list[str]] = {}
    for phase, code in PHASE_EXIT.items():
        by_code.setdefault(int(code), []).append(phase.value)
    return "; ".join(f"{code} {' or '.join(names)}" for code, names in sorted(by_code.items()))


_EPILOG = (
    "Examples (the first two run as written in a checkout, after the README's first command):\n"
    "  ./hplt-shard eng_Latn --corpus v4 --local-root examples/hplt-v4/clean --license CC0-1.0 --wds 9-10 --dry-run\n"
    "  ./hplt-shard eng_Latn --corpus v4 --local-root examples/hplt-v4/clean --out out/help-example \\\n"
    "      --run-dir runs/help-example --executor local --license CC0-1.0 --shard-rows 100\n"
    "On LUMI, with hplt-shard.conf holding PRESET=lumi and ACCOUNT=project_... (README, 'On LUMI'):\n"
    "  ./hplt-shard fin_Latn --corpus v4 --wds 9-10 --dry-run\n"
    "  ./hplt-shard fin_Latn --corpus v4 --wds 9-10 --out /scratch/project_XXXXXXXXX/fin-v4\n"
    "Exit codes: 0 done; 1 a run, task or check failed (the message names the --resume command); 2 a usage,\n"
    "conf, input or path problem (nothing started); 3 (--status) still queued or running; 4 (--status) stuck:\n"
    "a job pends for a reason that does not clear by itself; 130 interrupted (Ctrl-C).\n"
)


@dataclass
class _Options:
    """Adds options to a parser and records each one's flag by its dest."""

    given_only: bool
    flags: dict[str, str] = field(default_factory=dict)

    def __call__(self, container, *names: str, **kw) -> None:
        if self.given_only:
            kw["default"] = argparse.SUPPRESS
        action = container.add_argument(*names, **kw)
        self.flags[action.dest] = (action.option_strings or [action.dest.upper()])[0]


def command_line(given_only: bool = False, quiet: bool = False) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The parser, and each option's flag by its dest (for messages). `given_only`: no defaults, so a parse holds
    only what was given (what --resume checks); `quiet`: an error raises ValueError instead of printing."""
    add = _Options(given_only)
    p = (_QuietParser if quiet else argparse.ArgumentParser)(
        prog="hplt-shard",
        allow_abbrev=quiet,  # typed: full names only (`--ou` would reach printed commands); recorded ones parse as before
        description="Turn one language (or several, each into OUT/<LANG>/) of a sharded HPLT corpus into deterministic Parquet training shards.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for options in (_what_to_read, _output_shape, _where_it_runs, _commands):
        options(add, p)
    return p, add.flags


def _what_to_read(add: _Options, p: argparse.ArgumentParser) -> None:
    add(p, "lang", nargs="?", help="HPLT language code, e.g. eng_Latn; several in one run: fin_Latn,swe_Latn "
           "(OUT/<LANG>/ each), or all (every language folder under the corpus root)")
    add(p, "--langs-file", type=path_arg, help="several languages in one run: one code per line (# comments)")
    add(p, "--corpus", choices=("v3", "v4"), default="v4", help="HPLT release layout (default v4)")
    add(p, "--local-root", type=path_arg, help="folder holding LANG/ (v4 clean|noisy root, v3 sorted; any other folder is a corpus of its own, "
           "named after it); default from the preset")
    add(p, "--wds", help="WDS scores to include: 9-10, 8,9,10, 10 (default: all shards)")
    add(p, "--sources", help="v4 English source tags to include: cc,ia,ab (default: all)")
    add(p, "--out", type=path_arg, help="output folder (replaced atomically when the run finishes)")
    add(p, "--run-dir", type=path_arg, help="run directory (default runs/<corpus>-<subset>-<LANG>-<wds>)")
    add(p, "--executor", choices=("slurm", "local"), help="default: slurm when sbatch is on PATH, else local")


def _output_shape(add: _Options, p: argparse.ArgumentParser) -> None:
    add(p, "--shard-rows", type=int, default=DEFAULT_SHARD_ROWS, help=f"rows per output shard (default {DEFAULT_SHARD_ROWS:,})")
    add(p, "--val-permille", type=int, default=5, help="validation share in thousandths (default 5)")
    add(p, "--row-group-bytes", type=int, default=DEFAULT_ROW_GROUP_BYTES, help="text bytes per row group (default 64 MiB)")
    add(p, "--license", help="SPDX license of the packaging (conf LICENSE; HPLT presets: CC0-1.0)")
    add(p, "--dataset", help="dataset name in the manifest and the card's title (default hplt-<corpus>-<subset>-<LANG> "
           "for an HPLT root, else <name>-<LANG>)")
    add(p, "--corpus-name", metavar="NAME", help="the corpus is not HPLT and is called NAME: source ids NAME/<LANG>/<shard>, "
           "dataset NAME-<LANG>, a card without HPLT provenance (default: HPLT for a clean/noisy (v4) or sorted (v3) "
           "root folder, else the folder's name)")
    add(p, "--dataset-version", default="1", help="dataset version in the manifest (default 1)")
    add(p, "--replace-other", action="store_true",
           help="replace an OUT that holds another dataset (another language); without it such an OUT is refused")
    add(p, "--bad-records", choices=("fail", "quarantine"), default="fail",
           help="fail at the first bad record (default), or count and keep it in the run's quarantine/")
    add(p, "--shard-bytes", type=int,
           help="cut shards balanced by text bytes, about this many each (instead of every --shard-rows rows)")
    add(p, "--dp-ranks", help="data-parallel rank counts, e.g. 128,448: the shard count becomes a multiple of "
           "their lcm and shards are balanced by text bytes; the balance is recorded in OUT/__balance/balance.json")
    add(p, "--split-layout", choices=("column", "dirs"), default="column",
           help="column (default): one shard set with a split column; dirs: OUT/train/ and OUT/validation/, "
                "one shard set per split (rows keep their split column)")
    add(p, "--clean", action="store_true",
           help="quarantine documents that match the cleaning policy (thresholds: CLEAN_* conf keys); "
                "they are kept in OUT/__quarantine/clean/documents.parquet with their reasons")
    add(p, "--dataset-card", action="store_true",
           help="also write OUT/README.md (a dataset card for datasets.load_dataset) and OUT/_LEDGER.jsonl")
    add(p, "--annotations", metavar="FIELDS",
           help="keep these HPLT fields beside the shards, in OUT/__annotations/hplt/<shard name>: presets quality, "
                "register, lid, and field names (doc_scores, web-register, bsc-edu, ...), comma-separated")
    add(p, "--keep-spill", action="store_true",
           help="keep the partition spill in the run directory when the run is done (by default a done run removes "
           "it: about 1.6x the compressed input)")


def _where_it_runs(add: _Options, p: argparse.ArgumentParser) -> None:
    add(p, "--conf", type=path_arg, help="conf file (default ./hplt-shard.conf if present)")
    add(p, "--preset", help="preset name under presets/ (conf PRESET)")
    add(p, "--account", help="Slurm account (conf ACCOUNT)")
    add(p, "--slurm-partition", "--partition", dest="worker_partition",
           help="Slurm partition of every job (conf WORKER_PARTITION); --partition is an alias")
    add(p, "--counts-index", type=nonempty, help="shared counts index directory (conf COUNTS_INDEX)")
    add(p, "--release-changed", action="store_true",
           help="the release really changed: accept input files smaller (bytes or documents) than the counts "
                "index knows them, and let finalize replace those rows; without it such a file stops the run "
                "before anything is queued (fetch it again: a download cut short). Also with --resume")
    add(p, "--max-tasks", type=int, help="array tasks this run may queue (conf MAX_TASKS)")
    add(p, "--mem", help="memory per task of every stage, e.g. 4G; a bare number is megabytes, as for sbatch (default conf WORKER_MEM); a partition task "
           "buffers mem/8 of text; the plan and write jobs get more when the layout estimates they need it")
    add(p, "--time", help="wall time per task, at least 10 minutes (default estimated from bytes)")
    add(p, "--cpus-per-task", type=int, metavar="C", help="cores per partition/write array task, each "
           "running C tasks at once with C x --mem (conf CPUS_PER_TASK; default 1, lumi preset 16; with several languages "
           "an array task runs C units of any language)")
    add(p, "--partition-tasks", type=int, help="override the number of partition tasks")
    add(p, "--write-tasks", type=int, help="override the number of write tasks")
    add(p, "--buckets", type=int, help="advanced: id buckets (default from the estimated documents)")
    add(p, "--spill-bytes", type=int, help="advanced: text bytes a partition task buffers before it spills a sorted run (default mem/8)")
    add(p, "--jobs", type=int, default=os.cpu_count() or 1, help="local executor: tasks at once (default: cores)")


def _commands(add: _Options, p: argparse.ArgumentParser) -> None:
    add(p, "--dry-run", action="store_true", help="show the scope and job layout; write and submit nothing "
           "(with --resume: show what would be redone)")
    add(p, "--version", action="store_true", help="print the version and the code commit, then exit")
    g = p.add_mutually_exclusive_group()
    add(g, "--resume", type=path_arg, metavar="RUNDIR", help="finish an interrupted run: redo only what is unfinished")
    add(g, "--status", type=path_arg, metavar="RUNDIR", help="show where a run stands (per stage, failures, ETA); "
           f"exit {status_exit_codes()}")
    add(g, "--verify", type=path_arg, metavar="OUT", help="check an output folder against its manifest and the contract")
    add(g, "--publish", nargs=2, metavar=("OUT", "DEST"),
           help="verify OUT, upload it to an rclone destination (remote:bucket/prefix) and check it there; "
                "never overwrites; run again to finish an interrupted upload (record: --run-dir's _PUBLISHED.json)")


@dataclass(frozen=True)
class Request:
    # what to make
    lang: str | None  # LANG, a comma list, or `all`
    langs_file: Path | None
    corpus: str
    local_root: Path | None
    wds: str | None
    sources: str | None
    out: Path | None
    run_dir: Path | None
    executor: str | None
    # the content (the config hash)
    shard_rows: int
    val_permille: int
    row_group_bytes: int
    license: str | None
    dataset: str | None
    corpus_name: str | None
    dataset_version: str
    replace_other: bool
    bad_records: str
    shard_bytes: int | None
    dp_ranks: str | None
    split_layout: str
    clean: bool
    dataset_card: bool
    annotations: str | None  # --annotations: presets and HPLT field names (input/annotations.py)
    # where and how it runs
    conf: Path | None
    preset: str | None
    account: str | None
    worker_partition: str | None
    counts_index: str | None
    release_changed: bool  # inputs smaller than the counts index knows them are right (input/index_check.py)
    max_tasks: int | None
    mem: str | None
    time: str | None
    cpus_per_task: int | None
    partition_tasks: int | None
    write_tasks: int | None
    buckets: int | None
    spill_bytes: int | None
    keep_spill: bool
    jobs: int
    dry_run: bool
    # the other commands
    version: bool
    resume: Path | None
    status: Path | None
    verify: Path | None
    publish: tuple[str, str] | None

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "Request":
        values = {f.name: getattr(ns, f.name) for f in fields(cls)}
        if values["publish"] is not None:
            values["publish"] = tuple(values["publish"])
        return cls(**values)

    def for_language(self, lang: str) -> "Request":
        """This request for one of its languages."""
        return replace(self, lang=lang, langs_file=None)
