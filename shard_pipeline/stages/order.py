"""The order inside one bucket, from its ids alone: what writers and the byte-balanced plan both need.

Equal ids always meet in one bucket, so the check for repeated ids lives here too.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shard_pipeline.input.failures import RepeatedId
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages.spill import INDEX_SCHEMA, Section, SpillReader


class Readers:
    """One reader (an fd, read with pread) per partition task's spill file, opened on first use."""

    def __init__(self, run: RunDir):
        self.run = run
        self._open: dict[int, SpillReader] = {}

    def __getitem__(self, task: int) -> SpillReader:
        if task not in self._open:
            self._open[task] = SpillReader(self.run.spill_file(task))
        return self._open[task]

    def close(self) -> None:
        for r in self._open.values():
            r.close()


def sections_of(table: pa.Table, lo: int, hi: int) -> list[Section]:
    part = table.slice(lo, hi - lo).to_pydict()
    return [Section(**{k: part[k][i] for k in INDEX_SCHEMA.names}) for i in range(hi - lo)]


class BucketOrder:
    """The sorted order of one bucket, or of one split's rows in it: for each rank, (section, row) and text
    bytes. `split` None or "train" orders every row, so equal ids in different splits still meet ("train"
    then keeps the train rows); "val" keeps the few val rows first (a repeat of a train id is caught by the
    train order)."""

    def __init__(self, bucket: int, sections: list[Section], readers: Readers, cfg: RunConfig,
                 split: str | None = None):
        self.bucket = bucket
        self.sections = sections
        parts = [readers[s.task].order_columns(s) for s in sections]
        if parts:
            ids = pa.chunked_array([p.column("id") for p in parts], type=pa.string()).combine_chunks()
            tbytes = np.concatenate([p.column("text_bytes").to_numpy() for p in parts])
            val = np.concatenate([p.column("val").to_numpy(zero_copy_only=False) for p in parts])
        else:
            ids, tbytes, val = pa.array([], pa.string()), np.zeros(0, np.int32), np.zeros(0, bool)
        if split == "val":
            kept = np.flatnonzero(val)
            perm = kept[pc.sort_indices(ids.take(pa.array(kept))).to_numpy()]
        else:
            perm = pc.sort_indices(ids).to_numpy()
        offsets = np.cumsum([0] + [s.rows for s in sections])
        self._check_unique(ids.take(pa.array(perm)), perm, offsets, readers, cfg)
        if split == "train":
            perm = perm[~val[perm]]
        self.section = np.searchsorted(offsets, perm, side="right") - 1
        self.row = perm - offsets[self.section]
        self.text_bytes = tbytes[perm]

    def _check_unique(self, sorted_ids: pa.Array, perm: np.ndarray, offsets: np.ndarray, readers: Readers,
                      cfg: RunConfig) -> None:
        if len(sorted_ids) < 2:
            return
        same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, len(sorted_ids) - 1))
        if not pc.any(same).as_py():
            return
        k = pc.index(same, True).as_py()
        where = [self._origin(readers, cfg, int(perm[j]), offsets) for j in (k, k + 1)]
        raise RepeatedId(f"repeated document id {sorted_ids[k].as_py()!r}: {where[0]} and {where[1]}")

    def _origin(self, readers: Readers, cfg: RunConfig, position: int, offsets: np.ndarray) -> str:
        """`file:line` of the row at `position` in the concatenated sections."""
        k = int(np.searchsorted(offsets, position, side="right")) - 1
        s = self.sections[k]
        r = position - int(offsets[k])
        row = readers[s.task].rows(s, r, r + 1)
        src = cfg.content.inputs[row.column("source")[0].as_py()]
        return f"{src.location}:{row.column('line')[0].as_py()}"

    def __len__(self) -> int:
        return len(self.row)


