"""What a run is: the content it decides (hashed into the manifest) and how it executes (not hashed): the same
input and content give the same bytes with any executor, paths, memory or task count.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from shard_pipeline.contract.manifest import MANIFEST_FORMAT
from shard_pipeline.run.records import (
    HEADER,
    RUN_FORMAT,
    DamagedRunFile,
    EditedRecord,
    OtherFormat,
    Problem,
    Why,
    header_of,
    made_here,
    read_json,
    record_json,
)
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.units import parse_mem, scale_mem, share_of_mem, slurm_minutes
from shard_pipeline.run.run_json import read_run_json


@dataclass(frozen=True)
class InputRef:
    """One input shard as the run saw it at submit time."""

    name: str
    location: str
    size: int | None
    mtime: int | None
    source_id: str


@dataclass(frozen=True)
class Content:
    """Everything that decides the output bytes."""

    corpus: str
    subset: str
    lang: str
    dataset: str
    version: str
    license_spdx: str
    shard_rows: int
    val_permille: int
    row_group_bytes: int
    bad_records: str
    inputs: tuple[InputRef, ...]
    dataset_card: bool = False  # OUT also gets README.md (card) and _LEDGER.jsonl, listed in the manifest
    clean: dict | None = None  # the quarantine policy's thresholds (clean.CleanPolicy.to_json()), None = off
    shard_bytes: int | None = None  # byte-balanced shards of about this many text bytes (instead of shard_rows)
    dp_ranks: tuple[int, ...] = ()  # data-parallel rank counts the shard count must divide by (lcm)
    split_layout: str = "column"  # "dirs": train/ and validation/, one shard set each
    hplt: bool = True  # False: a corpus of the user's own, named `subset` (input/identity.py); the card claims no HPLT
    annotations: tuple[str, ...] = ()  # --annotations: HPLT fields kept beside the shards (input/annotations.py)

    @property
    def byte_balanced(self) -> bool:
        """Shards cut by text bytes (--shard-bytes or --dp-ranks) rather than every shard_rows rows."""
        return self.shard_bytes is not None or bool(self.dp_ranks)

    def sha256(self) -> str:
        """Hash of every content field; inputs by name and size, never their paths or mtimes. Annotations are
        hashed only when asked for, so a run without them keeps its config hash."""
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "annotations" or self.annotations}
        doc.update(format=MANIFEST_FORMAT, inputs=[[i.source_id, i.size] for i in self.inputs])
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


GROUPED_STAGES = ("partition", "write")  # an array task of these runs C units at once (worker/group.py)


@dataclass(frozen=True)
class StageResources:
    """What one array task (or single job) of a stage asks sbatch for, as the layout decided (submit/layout.py).
    For partition and write, `cpus` is also how many units an array task runs at once, and `mem` covers them."""

    mem: str
    time: str
    cpus: int = 1


@dataclass(frozen=True)
class Execution:
    """How the run executes; free to differ between runs of the same content."""

    executor: str
    out: str
    partition_tasks: int
    write_tasks: int
    buckets: int
    spill_bytes: int
    python: str
    resources: dict[str, StageResources] = field(default_factory=dict)  # stage name -> its sbatch resources
    intermediate_compression: str = "lz4"
    counts_index: str | None = None
    counts_index_key: str | None = None  # "<corpus>/<subset>" of this root's rows (identity.index_key); None: legacy
    keep_spill: bool = False  # a done run keeps its partition spill (finalize.remove_spill)
    release_changed: bool = False  # --release-changed: inputs smaller than the counts index knows them are right

    def units_per_task(self, stage: str) -> int:
        """C: the units one array task of `stage` runs at once (its cores); 1 for plan and finalize."""
        res = self.resources.get(stage) if stage in GROUPED_STAGES else None
        return res.cpus if res is not None else 1

    def with_resources(self, mem: str | None = None, time: str | None = None, cpus: int | None = None) -> "Execution":
        """The resources after a resume's --mem/--time/--cpus-per-task: every stage gets at least that memory (one
        unit's, as at submission) and time; partition and write array tasks run `cpus` units each."""
        def applied(stage: str, r: StageResources) -> StageResources:
            k = self.units_per_task(stage)
            unit = share_of_mem(r.mem, k)
            if mem is not None and parse_mem(mem) > parse_mem(unit):
                unit = mem
            longer = time if time is not None and slurm_minutes(time) > slurm_minutes(r.time) else r.time
            k2 = cpus if cpus is not None and stage in GROUPED_STAGES else k
            return StageResources(scale_mem(unit, k2), longer, k2 if stage in GROUPED_STAGES else r.cpus)

        return replace(self, resources={stage: applied(stage, r) for stage, r in self.resources.items()})


@dataclass(frozen=True)
class RunConfig:
    content: Content
    execution: Execution

    def index_key(self) -> tuple[str, str]:
        """The run's rows' place in the counts index (input/identity.py); corpus/subset when none is recorded."""
        key = self.execution.counts_index_key
        if key:
            corpus, subset = key.split("/", 1)
            return corpus, subset
        return self.content.corpus, self.content.subset

    def to_json(self) -> dict[str, Any]:
        """config.json: the header (run/records.py Made, whose config_sha256 is this content's hash), then the config."""
        return record_json(made_here(self.content.sha256()), {"content": asdict(self.content), "execution": asdict(self.execution)})

    @staticmethod
    def from_json(doc: dict[str, Any]) -> "RunConfig":
        """The config of a config.json document (its header aside), type-checked: WrongType names a field that is not."""
        return parse_as(RunConfig, {k: v for k, v in doc.items() if k not in HEADER})


EDITED_STEP = ("a run's content is fixed when it is made: put back the config.json it was made with, or start a new run "
               "(a fresh --run-dir) with the options wanted")


def load_config(run: RunDir) -> RunConfig:
    """The run's config.json, typed and whole: of this format, its content hashing to the config_sha256 it and
    run.json record; else one named refusal (an edit would make the run's records disagree with its config)."""
    path = run.config_json
    doc = read_json(path)
    made = header_of(doc, path)
    if made.run_format != RUN_FORMAT:
        raise OtherFormat(Problem(Why.OTHER_FORMAT, path, f"format {made.run_format}; this version reads {RUN_FORMAT}",
                                  "see or resume it with the version that made it, or start a new run"))
    try:
        cfg = RunConfig.from_json(doc)
    except WrongType as exc:
        raise DamagedRunFile(path, str(exc)) from None
    actual = cfg.content.sha256()
    if actual != made.config_sha256:
        raise EditedRecord(Problem(Why.EDITED, path, f"its content hashes to {actual[:12]}, it records "
                                                     f"{made.config_sha256[:12]}", EDITED_STEP))
    if run.run_json.exists():
        record = header_of(read_run_json(run.run_json), run.run_json)
        if (record.config_sha256, record.code_version) != (made.config_sha256, made.code_version):
            raise EditedRecord(Problem(Why.EDITED, path, f"not the one {run.run_json.name} records: config "
                                                         f"{made.config_sha256[:12]} code {made.code_version[:12]}, "
                                                         f"{run.run_json.name}: config {record.config_sha256[:12]} "
                                                         f"code {record.code_version[:12]}", EDITED_STEP))
    return cfg
