"""What the user asked for, typed: the command line's one product (nothing below the CLI sees argparse)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path


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
