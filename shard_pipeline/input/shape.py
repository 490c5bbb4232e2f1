"""Which HPLT release a corpus looks like, from its file names and the first records.

`--corpus v3` on v4 records (or the reverse) reads without an error but with `lang='und'` and wrong source
ids, so the submit checks the shape first: v3 records carry a `lang` list, v4 ones `openlid_v3` (or
`openlid-v3`); v4 English file names carry a source tag (`8_30.ia`).
"""
from __future__ import annotations

import re
from typing import Sequence

import orjson

from shard_pipeline.errors import UsageError
from shard_pipeline.input.fetch import is_url

_TAGGED = re.compile(r"^\d+_\d+\.(cc|ia|ab)$")
PROBE_SHARDS = 3  # shards whose head is looked at
PROBE_LINES = 50  # records read from each


def record_shape(obj: object) -> tuple[str, str] | None:
    """("v4", field) or ("v3", field) when one record shows its release, else None."""
    if not isinstance(obj, dict):
        return None
    for key in ("openlid_v3", "openlid-v3"):
        if key in obj:
            return "v4", key
    if isinstance(obj.get("lang"), list):
        return "v3", "lang"
    return None


def head_shape(location: str, lines: int = PROBE_LINES) -> tuple[str, str, int] | None:
    """(release, field, line) from the first record of a local shard that shows it; None if none does."""
    from shard_pipeline.input.reader import open_decompressed

    try:
        with open_decompressed(location) as f:
            for n in range(1, lines + 1):
                raw = f.readline()
                if not raw:
                    return None
                try:
                    shape = record_shape(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    continue
                if shape is not None:
                    return shape[0], shape[1], n
    except Exception:  # a broken stream is the partition stage's to report, with its line
        return None
    return None


def check_record_shape(shards: Sequence, corpus: str) -> None:
    """Refuse a `--corpus` that the file names or the first records contradict, naming the right one."""
    if corpus == "v3":
        tagged = [s for s in shards if _TAGGED.match(s.name)]
        if tagged:
            raise UsageError(f"--corpus v3, but {tagged[0].location} is named like a v4 English shard "
                             f"(source tag .{tagged[0].name.rsplit('.', 1)[1]}); use --corpus v4")
    local = [s for s in shards if not is_url(s.location)]
    for shard in local[:PROBE_SHARDS]:
        found = head_shape(shard.location)
        if found is not None and found[0] != corpus:
            release, field, line = found
            raise UsageError(f"--corpus {corpus}, but {shard.location} holds {release} records (line {line} has "
                             f"`{field}`, {'v4 records have no top-level lang' if release == 'v3' else 'v3 records have no openlid_v3'}); "
                             f"use --corpus {release}")


def head_records(location: str, lines: int = PROBE_LINES) -> list[object]:
    """The parsed first records of a local shard (lines that are not JSON are the partition stage's to report)."""
    from shard_pipeline.input.reader import open_decompressed

    out: list[object] = []
    try:
        with open_decompressed(location) as f:
            for _ in range(lines):
                raw = f.readline()
                if not raw:
                    break
                try:
                    out.append(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    continue
    except Exception:  # a broken stream is the partition stage's to report, with its line
        pass
    return out


def annotation_probe(shards: Sequence, fields: tuple[str, ...]) -> float:
    """--annotations at submit: refuse a field the first records do not carry (naming what they do carry), else
    the kept fields' mean bytes per record, for the dry-run's extra volume."""
    from shard_pipeline.input.annotations import AbsentField, probe_fields

    local = [s for s in shards if not is_url(s.location)][:PROBE_SHARDS]
    try:
        return probe_fields([(s.location, head_records(s.location)) for s in local], fields)
    except AbsentField as exc:
        raise UsageError(str(exc)) from None
