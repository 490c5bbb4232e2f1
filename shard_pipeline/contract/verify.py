"""Verify a hplt-shard output folder from its files alone: `./hplt-shard --verify OUT`.

Trusts nothing the writer recorded: every number in the manifest is recomputed, every file re-hashed,
every row re-derived (docs/verify.md lists the checks). Memory stays bounded: files are hashed in blocks,
shards read a row group at a time; only the rows that are not their own cluster root are kept.

    python -m shard_pipeline.contract.verify OUT [--shallow]
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shard_pipeline.contract.extras import BALANCE_NAME, OLD_BALANCE_NAME
from shard_pipeline.contract.root import is_root
from shard_pipeline.contract.manifest import MANIFEST_NAME, manifest_sets
from shard_pipeline.contract.rules import DICTIONARY_COLUMNS, SCHEMA
from shard_pipeline.errors import ExitCode
from shard_pipeline.contract.verify_files import _check_files
from shard_pipeline.contract.verify_manifest import Problem, _check_manifest, _Report, _short
from shard_pipeline.contract.annotations import order_problem, shard_of
from shard_pipeline.contract.verify_rows import GroupCutChecker, RowState, check_rows
from shard_pipeline.units import plural

_PLAIN_COLUMNS = frozenset(c for c in SCHEMA.names if c not in DICTIONARY_COLUMNS)


@dataclass(frozen=True)
class _SetRules:
    """What the rows of one shard set must follow: the manifest's params, its cut rule and its split."""

    shard_rows: int
    val_permille: int
    row_group_bytes: int
    byte_balanced: bool  # cut by text bytes (__balance/balance.json), not every shard_rows rows
    split: str | None  # the split of every row of a set of the dirs layout; None: rows of both


# ---------------------------------------------------------------- 3 and 4. shards and rows


def _schema_diff(got: pa.Schema) -> str:
    for i, want in enumerate(SCHEMA):
        if i >= len(got):
            return f"column {i} {want.name!r} is missing"
        have = got.field(i)
        if not have.equals(want):
            null = lambda f: "" if f.nullable else " not null"  # noqa: E731
            return f"column {i} is {have.name!r} {have.type}{null(have)}, expected {want.name!r} {want.type}{null(want)}"
    if len(got) > len(SCHEMA):
        return f"extra columns {got.names[len(SCHEMA):]}"
    return "schema metadata differs"


def _check_shard(pf: pq.ParquetFile, e: dict[str, Any], first: int, last: bool, n: int, rules: _SetRules,
                 st: RowState, rep: _Report, deep: bool) -> tuple[int, int]:
    """Checks 3 (and 4 when deep) on one open shard; returns its rows and text bytes (the manifest's
    text bytes when not all of it could be read)."""
    name = e["name"]
    rows = pf.metadata.num_rows
    _check_row_count(name, rows, e["rows"], last, n, rules, rep)
    schema_ok = pf.schema_arrow.equals(SCHEMA)
    if not schema_ok:
        rep.add(name, f"Arrow schema differs from the contract's: {_schema_diff(pf.schema_arrow)}")
    _check_encoding(name, pf.metadata, rep)
    if not schema_ok:  # the columns cannot be trusted to mean what the contract says
        st.mark_unseen(first, first + rows)
        return rows, e["text_bytes"]
    shard_text = _check_row_groups(pf, name, first, rules, st, rep, deep)
    if shard_text is not None and shard_text != e["text_bytes"]:
        rep.add(name, f"{shard_text} text bytes, the manifest says {e['text_bytes']}")
    return rows, e["text_bytes"] if shard_text is None else shard_text


def _check_row_count(name: str, rows: int, listed: int, last: bool, n: int, rules: _SetRules, rep: _Report) -> None:
    """The shard holds the rows the manifest lists and the cut rule allows (shard_rows, or byte-balanced)."""
    shard_rows = rules.shard_rows
    if rows != listed:
        rep.add(name, f"{rows} rows, the manifest says {listed}")
    if rules.byte_balanced:  # cut by text bytes (__balance/balance.json): every shard holds rows, none is empty
        if rows == 0 and n > 1:
            rep.add(name, "0 rows; a byte-balanced shard set has no empty shard")
    elif not last and rows != shard_rows:
        rep.add(name, f"{rows} rows; every shard but the last holds exactly shard_rows = {shard_rows}")
    elif last and not (1 <= rows <= shard_rows or (rows == 0 and n == 1)):
        allowed = f"0..{shard_rows}" if n == 1 else f"1..{shard_rows}"
        rep.add(name, f"{rows} rows; the last shard holds {allowed}")


def _check_encoding(name: str, md: pq.FileMetaData, rep: _Report) -> None:
    """Every column chunk is ZSTD, and the columns the contract keeps plain have no dictionary page."""
    not_zstd, dict_plain, chunks = [], [], 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            chunks += 1
            if col.compression != "ZSTD":
                not_zstd.append(f"row group {g} column {col.path_in_schema}: {col.compression}")
            if col.path_in_schema in _PLAIN_COLUMNS and col.has_dictionary_page:
                dict_plain.append(f"row group {g} column {col.path_in_schema}")
    if not_zstd:
        rep.add(name, f"{len(not_zstd)} of {chunks} column chunks are not ZSTD-compressed (first: {not_zstd[0]})")
    if dict_plain:
        rep.add(name, f"{len(dict_plain)} column chunks of columns the contract keeps plain are dictionary-encoded "
                f"(first: {dict_plain[0]})")


def _check_row_groups(pf: pq.ParquetFile, name: str, first: int, rules: _SetRules, st: RowState, rep: _Report,
                      deep: bool) -> int | None:
    """The row-group cuts and (deep) every row; the shard's text bytes, None when a row group could not be read."""
    cuts = GroupCutChecker(rules.row_group_bytes)
    shard_text, text_complete = 0, True
    row = first
    for g in range(pf.metadata.num_row_groups):
        g_rows = pf.metadata.row_group(g).num_rows
        try:
            table = pf.read_row_group(g, columns=None if deep else ["text"])
            sizes = pc.binary_length(table.column("text")).to_pylist()
        except Exception as exc:
            rep.add(name, f"row group {g} (rows {row}..{row + g_rows - 1}) cannot be read: {exc}")
            st.mark_unseen(row, row + g_rows)
            text_complete = False
            cuts.reset()
            row += g_rows
            continue
        for what in cuts.group(g, sizes):
            rep.capped("row group", name, what)
        shard_text += sum(sizes)
        if deep:
            try:
                check_rows(table, row, name, rules.val_permille, st, rep, rules.split)
            except Exception as exc:  # e.g. text that is not valid UTF-8
                rep.add(name, f"row group {g} (rows {row}..{row + g_rows - 1}): rows cannot be checked: {exc}")
                st.mark_unseen(row, row + g_rows)
        row += g_rows
    return shard_text if text_complete else None


def _check_shards(out: Path, m: dict[str, Any], rep: _Report, deep: bool) -> None:
    total_rows = total_text = 0
    train = val = 0
    unseen = False
    byte_balanced = any(f.get("name") in (BALANCE_NAME, OLD_BALANCE_NAME) for f in m.get("files", []))
    for _, split, entries in manifest_sets(m):
        st = RowState()  # each set is its own shard set: order, row indexes and clusters start again
        first = 0  # the set's index of the shard's first row
        rules = _SetRules(m["params"]["shard_rows"], m["params"]["val_permille"], m["params"]["row_group_bytes"],
                          byte_balanced, split)
        for i, e in enumerate(entries):
            rows, text = _check_one(out, e, first, i == len(entries) - 1, len(entries), rules, st, rep, deep)
            first += rows
            total_rows += rows
            total_text += text
        train, val, unseen = train + st.train, val + st.val, unseen or bool(st.unseen)
    if deep:
        _check_ids_across_sets(out, m, rep)

    if m["rows"] != total_rows:
        rep.add(MANIFEST_NAME, f"rows is {m['rows']}, the shards hold {total_rows}")
    if m["text_bytes"] != total_text:
        rep.add(MANIFEST_NAME, f"text_bytes is {m['text_bytes']}, the shards hold {total_text}")
    splits = m["splits"]
    if deep and not unseen:
        for k, actual in (("train", train), ("val", val)):
            if splits[k] != actual:
                rep.add(MANIFEST_NAME, f"splits.{k} is {splits[k]}, the shards hold {actual} {k} rows")
    elif splits["train"] + splits["val"] != total_rows:  # the rows themselves were not (all) read
        rep.add(MANIFEST_NAME, f"splits add up to {splits['train'] + splits['val']}, the shards hold {total_rows} rows")


def _ids_of(out: Path, entries: list[dict[str, Any]]) -> Iterator[tuple[bytes, str]]:
    """(id as UTF-8, shard name) of every readable row of a set, in file order; unreadable parts are reported elsewhere."""
    for e in entries:
        try:
            pf = pq.ParquetFile(out / e["name"])
        except Exception:
            continue
        try:
            for g in range(pf.metadata.num_row_groups):
                ids = pf.read_row_group(g, columns=["id"]).column("id").to_pylist()
                yield from ((i.encode("utf-8"), e["name"]) for i in ids)
        except Exception:
            continue
        finally:
            pf.close()


def _check_ids_across_sets(out: Path, m: dict[str, Any], rep: _Report) -> None:
    """An id is unique in the whole output, not only in its set: merge the sets' sorted id streams (the id
    column read once more; memory one row group per set)."""
    sets = manifest_sets(m)
    if len(sets) < 2:
        return
    prev: tuple[bytes, str] | None = None
    for key, name in heapq.merge(*(_ids_of(out, entries) for _, _, entries in sets)):
        if prev is not None and key == prev[0] and name.split("/")[0] != prev[1].split("/")[0]:
            rep.capped("order", name, f"id {_short(key.decode('utf-8', 'replace'))} is also in {prev[1]} "
                       "(ids are unique across the shard sets)")
        prev = (key, name)


def _check_one(out: Path, e: dict[str, Any], first: int, last: bool, n: int, rules: _SetRules, st: RowState,
               rep: _Report, deep: bool) -> tuple[int, int]:
    """Open one listed shard and check it; one that cannot be opened counts as its manifest entry, unseen."""
    name = e["name"]
    try:
        pf = None if os.path.lexists(out / name) and not os.access(out / name, os.R_OK) else pq.ParquetFile(out / name)
    except FileNotFoundError:  # reported by the file check, as is a file this user may not read (None above)
        pf = None
    except Exception as exc:
        rep.add(name, f"not a readable Parquet file: {exc}")
        pf = None
    if pf is None:
        st.mark_unseen(first, first + e["rows"])
        return e["rows"], e["text_bytes"]
    try:
        return _check_shard(pf, e, first, last, n, rules, st, rep, deep)
    finally:
        pf.close()


# ---------------------------------------------------------------- entry points


def verify_output(out: Path, *, deep: bool = True) -> list[Problem]:
    """Every way the folder `out` breaks the corpus-shard contract; [] when it verifies. deep=False skips the
    per-row checks, still hashing every file and reading the text column for the row-group and byte checks."""
    out = Path(out)
    rep = _Report()
    if not out.is_dir():
        rep.add(".", f"{out} is not a directory" if out.exists() else f"{out} does not exist")
        return rep.finish()
    manifest = _check_manifest(out, rep)
    if manifest is not None:
        _check_files(out, manifest, rep)
        _check_shards(out, manifest, rep, deep)
        _check_annotations(out, manifest, rep)
    return rep.finish()


def _check_annotations(out: Path, m: dict[str, Any], rep: _Report) -> None:
    """Each annotation file (--annotations) holds its shard's ids in its shard's order."""
    shards = {e["name"] for e in m["shards"]}
    for e in m["files"]:
        shard = shard_of(e["name"])
        if shard is None or not (out / e["name"]).is_file():
            continue  # a missing file is said by _check_files
        if shard not in shards:
            rep.add(e["name"], f"an annotation file of {shard}, which the manifest does not list as a shard")
        elif (out / shard).is_file():
            why = order_problem(out / shard, out / e["name"])
            if why:
                rep.add(e["name"], why)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shard_pipeline.contract.verify",
        description="Verify a hplt-shard output folder against docs/formats/corpus-shard.md. "
        "Exit 0: verified; 1: problems found (one line each); 2: bad usage, no such folder, or files this user may "
        "not read (nothing else found).",
    )
    parser.add_argument("out", metavar="OUT", help="the output folder (holds _MANIFEST.json), or the root of a "
                        "run of several languages (holds LANG/ outputs: each is verified, with one summary)")
    parser.add_argument("--shallow", action="store_true",
                        help="skip the per-row checks (files, hashes, schema and row groups are still checked)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, bad usage 2
        return exc.code if isinstance(exc.code, int) else 2
    out = Path(args.out)
    if not out.is_dir():  # a wrong path is a usage error (exit 2), not an output that fails the contract
        what = "is not a directory" if out.exists() else "does not exist"
        print(f"hplt-shard: --verify {out}: {what}; give the output folder (the one holding {MANIFEST_NAME})",
              file=sys.stderr)
        return ExitCode.USAGE
    if is_root(out):  # ROOT/<LANG>/ outputs of a run of several languages: each verified, one summary
        return root_main(out, deep=not args.shallow)
    problems = verify_output(out, deep=not args.shallow)
    if problems:
        for p in problems:
            print(f"{p.file}: {p.what}")
        unread = all(p.unreadable for p in problems)
        print(failed_verdict(out, len(problems), unread), file=sys.stderr)  # stdout: the problems, one a line
        return ExitCode.USAGE if unread else ExitCode.FAILED
    manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    suffix = " (shallow: rows not checked)" if args.shallow else ""
    print(f"OK: {plural(manifest['rows'], 'row')} in {plural(len(manifest['shards']), 'shard')} verified{suffix}")
    return ExitCode.OK


def failed_verdict(out: Path, problems: int, unread: bool) -> str:
    """The closing line of a --verify that did not pass: a reader of a long listing sees the verdict last."""
    if unread:
        return f"NOT VERIFIED: {plural(problems, 'file')} of {out} this user may not read (nothing else found)"
    return f"FAILED: {plural(problems, 'problem')} in {out}; it is not the output its manifest describes"


def root_main(root: Path, deep: bool) -> int:
    from shard_pipeline.contract.verify_root import root_main as verify_each

    return verify_each(root, deep, lambda out, deep_: verify_output(out, deep=deep_))


if __name__ == "__main__":
    sys.exit(main())
