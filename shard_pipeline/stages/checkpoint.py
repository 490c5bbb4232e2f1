"""A partition task's checkpoint: a small fixed-size record plus an append-only receipts log.

Each input appends one fsynced line to ``task-N.receipts.jsonl`` (its receipt and the sections its run
added); then the checkpoint, whose size does not grow, records the log's, the spill's and the quarantine's
lengths, so a checkpoint costs the same after every input (rewriting everything was quadratic: 8,000
files, 291 s). A restart cuts all three back to those lengths. Durability order: spill and quarantine,
log line, checkpoint (temp file fsynced, renamed); an older checkpoint found after a crash is consistent too.
"""
from __future__ import annotations

import orjson

from shard_pipeline.files import atomic_file, fsync_file, json_bytes, naming
from shard_pipeline.run.receipts import InputReceipt
from shard_pipeline.run.receipts import PartitionCheckpoint as Saved
from shard_pipeline.run.records import Made, Problem, read_record, record_json
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.run.rundir import CHECKPOINT_FORMAT as _FORMAT
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.tasklog import log
from shard_pipeline.stages.spill import Section, SpillWriter


class PartitionCheckpoint:
    """Where a partition task stood after its last whole input; one that is not this run's (damaged, another
    configuration or code version: run/records.py) is not continued from."""

    def __init__(self, run: RunDir, task: int, made: Made):
        self.made = made
        self.path = run.partition_checkpoint(task)
        self.log_path = run.partition_receipts_log(task)
        self.quarantine_path = run.quarantine_file(task)
        self._saved_sections = 0  # writer.sections already in the log
        self._inputs_done = 0
        self._read = self._compressed = 0  # totals, for --status's progress

    def restore(self, writer: SpillWriter) -> tuple[list[InputReceipt], int]:
        """(receipts, pii spans) of the inputs already done; spill, quarantine and log cut back to the checkpoint."""
        if not self.path.exists():
            return self._fresh()
        cp = read_record(self.path, Saved, self.made)
        if isinstance(cp, Problem) or cp.format != _FORMAT:
            log.info(f"partition: {cp.reason if isinstance(cp, Problem) else self.path.name + ' has another format'}; "
                     "starting the task over")
            return self._fresh()
        entries = self._read_log(cp.log_bytes)
        try:
            receipts = [parse_as(InputReceipt, r) for e in entries for r in e["inputs"]]
            sections = [Section(**s) for e in entries for s in e["sections"]]
        except (WrongType, KeyError, TypeError):
            receipts, sections = [], []
        if len(receipts) != cp.inputs_done or len(sections) != cp.sections:
            log.info(f"partition: {self.log_path} does not hold what {self.path} names "
                     f"({len(receipts)} of {cp.inputs_done} inputs); starting the task over")
            return self._fresh()
        writer.restore(cp.spill_bytes, sections, cp.runs)
        if self.quarantine_path.exists():
            with open(self.quarantine_path, "r+b") as f:
                f.truncate(cp.quarantine_bytes)
        self._saved_sections = len(sections)
        self._inputs_done = len(receipts)
        self._read = sum(r.read for r in receipts)
        self._compressed = sum(r.compressed_bytes for r in receipts)
        return receipts, cp.pii_spans

    def save(self, writer: SpillWriter, new_receipts: list[InputReceipt], pii_spans: int) -> None:
        """Record the inputs finished since the last save (the quarantine writer must be closed: fsynced)."""
        spill_bytes = writer.flush()
        new_sections = writer.sections[self._saved_sections:]
        line = orjson.dumps({"inputs": new_receipts, "sections": new_sections}) + b"\n"
        with naming(self.log_path), open(self.log_path, "ab") as f:  # a full disk names the log
            f.write(line)
            fsync_file(f)
            log_bytes = f.tell()
        self._saved_sections = len(writer.sections)
        self._inputs_done += len(new_receipts)
        self._read += sum(r.read for r in new_receipts)
        self._compressed += sum(r.compressed_bytes for r in new_receipts)
        with atomic_file(self.path, sync_dir=False) as f:
            f.write(json_bytes(record_json(self.made, Saved(
                format=_FORMAT,
                log_bytes=log_bytes,
                inputs_done=self._inputs_done,
                sections=self._saved_sections,
                inputs=new_receipts,  # this save's receipts only; all of them are in the log
                read=self._read,
                compressed_bytes=self._compressed,
                spill_bytes=spill_bytes,
                runs=writer.runs,
                pii_spans=pii_spans,
                quarantine_bytes=self.quarantine_path.stat().st_size if self.quarantine_path.exists() else 0,
            ))))

    def remove(self) -> None:
        """After the receipt: the checkpoint first, so a log is never left with a checkpoint naming it."""
        self.path.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)

    def _fresh(self) -> tuple[list, int]:
        self.path.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)
        self.quarantine_path.unlink(missing_ok=True)
        return [], 0

    def _read_log(self, log_bytes: int) -> list[dict]:
        """The log's entries up to `log_bytes` (a longer log is cut back; a shorter one yields what it has)."""
        if not self.log_path.exists():
            return []
        with open(self.log_path, "r+b") as f:
            f.truncate(log_bytes)
            data = f.read()
        try:
            return [orjson.loads(line) for line in data.splitlines()]
        except orjson.JSONDecodeError:
            return []
