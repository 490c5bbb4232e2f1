"""Row rules of `--verify`: each row re-derived from its text, and the row-group cuts re-checked.

Apart from the file and manifest checks because they carry state across row groups and shards: the
previous id and the rows that are not their own minhash cluster root.
"""
from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from shard_pipeline.contract.rules import SCHEMA, split_of
from shard_pipeline.contract.verify_manifest import _Report, _short


@dataclass
class GroupCutChecker:
    """Check, one row group at a time, that a shard's groups equal row_group_bounds(sizes, budget): the greedy
    rule makes a group of 2+ rows fit the budget and closes every group but a shard's last only when the next
    row would not fit, so only the previous group's total is kept."""

    budget: int
    prev_total: int | None = None
    prev_index: int = -1

    def group(self, index: int, sizes: Sequence[int]) -> list[str]:
        bad = []
        total = sum(sizes)
        if self.prev_total is not None and sizes and self.prev_total + sizes[0] <= self.budget:
            bad.append(f"row group {self.prev_index} was cut early: its {self.prev_total} text bytes and the "
                       f"next row's {sizes[0]} fit in row_group_bytes {self.budget}")
        if not sizes:
            bad.append(f"row group {index} is empty")
        elif len(sizes) > 1 and total > self.budget:
            bad.append(f"row group {index} holds {len(sizes)} rows with {total} text bytes, over row_group_bytes "
                       f"{self.budget} (only a single row may exceed it)")
        self.prev_total, self.prev_index = (total, index) if sizes else (None, -1)
        return bad

    def reset(self) -> None:
        self.prev_total, self.prev_index = None, -1


class RowState:
    """What the row checks carry across row groups and shards."""

    def __init__(self) -> None:
        self.prev_id: bytes | None = None
        self.prev_id_str: str = ""
        self.non_roots: set[int] = set()  # rows whose minhash_cluster is not their own index
        self.unseen: list[tuple[int, int]] = []  # global row ranges that could not be read
        self.train = self.val = 0

    def mark_unseen(self, start: int, stop: int) -> None:
        if stop > start:
            self.unseen.append((start, stop))

    def is_unseen(self, index: int) -> bool:
        k = bisect.bisect_right(self.unseen, (index, float("inf"))) - 1
        return k >= 0 and self.unseen[k][0] <= index < self.unseen[k][1]


def check_rows(table: pa.Table, first: int, name: str, val_permille: int, st: RowState, rep: _Report,
                set_split: str | None = None) -> None:
    cols = {c: table.column(c).to_pylist() for c in SCHEMA.names}
    for k in range(table.num_rows):
        idx = first + k
        id_ = cols["id"][k]
        where = f"row {idx} (id {_short(id_)})"
        idb = id_.encode("utf-8")
        if not id_:
            rep.capped("empty value", name, f"{where}: id is empty")
        if st.prev_id is not None and idb <= st.prev_id:
            how = "repeats" if idb == st.prev_id else "sorts before"
            rep.capped("order", name, f"{where}: id {how} the previous row's {_short(st.prev_id_str)} "
                       "(ids must strictly increase in UTF-8 byte order)")
        st.prev_id, st.prev_id_str = idb, id_

        text = cols["text"][k]
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        if cols["sha256"][k] != digest:
            rep.capped("sha256", name, f"{where}: sha256 column is not the SHA-256 of the text")
        want = split_of(digest, val_permille)
        got = cols["split"][k]
        if got != want:
            rep.capped("split", name, f"{where}: split is {_short(got)}, the text's hash at val_permille "
                       f"{val_permille} gives {want!r}")
        if set_split is not None and got != set_split:
            rep.capped("split", name, f"{where}: split is {_short(got)} in the shard set of split {set_split!r}")
        if got == "train":
            st.train += 1
        elif got == "val":
            st.val += 1
        if cols["n_chars"][k] != len(text):
            rep.capped("n_chars", name, f"{where}: n_chars is {cols['n_chars'][k]}, the text has {len(text)} code points")

        v = cols["minhash_cluster"][k]
        if v != idx:
            st.non_roots.add(idx)
        if not 0 <= v <= idx:
            rep.capped("minhash_cluster", name, f"{where}: minhash_cluster {v} is not a row index in 0..{idx}")
        elif v < idx and not st.is_unseen(v) and v in st.non_roots:
            rep.capped("minhash_cluster", name, f"{where}: minhash_cluster {v} names row {v}, whose own "
                       f"minhash_cluster is not {v} (a cluster's value is its smallest row index)")

        for col in ("lang", "url", "license_spdx"):
            if not cols[col][k]:
                rep.capped("empty value", name, f"{where}: {col} is empty")
        if cols["pii_redactions"][k] < 0:
            rep.capped("pii_redactions", name, f"{where}: pii_redactions is negative ({cols['pii_redactions'][k]})")
