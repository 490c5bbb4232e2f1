"""The order inside one bucket, from its ids alone: what writers and the byte-balanced plan both need.

Equal ids always meet in one bucket, so the check for repeated ids lives here too.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .rundir import RunDir
from .runconfig import RunConfig
from .spill import Section, SpillReader


class RepeatedId(Exception):
    """Two documents share an id: the order would not be a function of the documents."""


class Readers:
    """One memory-mapped reader per partition task's spill file, opened on first use."""

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
    return [Section(*(part[k][i] for k in ("task", "run", "bucket", "offset", "length", "rows", "text_bytes"))) for i in range(hi - lo)]


class BucketOrder:
    """The sorted order of one bucket: for each rank in it, (section, row) and text bytes."""

    def __init__(self, bucket: int, sections: list[Section], readers: Readers, cfg: RunConfig):
        self.bucket = bucket
        self.sections = sections
        parts = [readers[s.task].order_columns(s) for s in sections]
        if parts:
            ids = pa.chunked_array([p.column("id") for p in parts], type=pa.string()).combine_chunks()
            tbytes = np.concatenate([p.column("text_bytes").to_numpy() for p in parts])
        else:
            ids, tbytes = pa.array([], pa.string()), np.zeros(0, np.int32)
        perm = pc.sort_indices(ids).to_numpy()
        offsets = np.cumsum([0] + [s.rows for s in sections])
        self.section = np.searchsorted(offsets, perm, side="right") - 1
        self.row = perm - offsets[self.section]
        self.text_bytes = tbytes[perm]
        self._check_unique(ids.take(pa.array(perm)), readers, cfg)

    def _check_unique(self, sorted_ids: pa.Array, readers: Readers, cfg: RunConfig) -> None:
        if len(sorted_ids) < 2:
            return
        same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, len(sorted_ids) - 1))
        if not pc.any(same).as_py():
            return
        k = pc.index(same, True).as_py()
        where = [self._origin(readers, cfg, k), self._origin(readers, cfg, k + 1)]
        raise RepeatedId(f"repeated document id {sorted_ids[k].as_py()!r}: {where[0]} and {where[1]}")

    def _origin(self, readers: Readers, cfg: RunConfig, rank: int) -> str:
        s = self.sections[self.section[rank]]
        r = int(self.row[rank])
        row = readers[s.task].rows(s, r, r + 1)
        src = cfg.content.inputs[row.column("source")[0].as_py()]
        return f"{src.location}:{row.column('line')[0].as_py()}"

    def __len__(self) -> int:
        return len(self.row)


