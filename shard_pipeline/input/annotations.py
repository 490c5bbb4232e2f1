"""HPLT's per-document annotations kept beside the shards (--annotations): which fields, their types, their values.

Every field has one Arrow type here whatever the records hold, so the files' schema depends on the option
alone: a missing or null field is null; a value of another type is a bad record (`annotation_type`), named
with its file and line like every other bad line, never coerced.
"""
from __future__ import annotations

import functools
import math

import orjson
import pyarrow as pa

from shard_pipeline.contract.annotations import column_name

_STR, _INT, _FLOAT, _BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()
_STRS, _FLOATS = pa.list_(_STR), pa.list_(_FLOAT)
_LID = pa.struct([("lang", _STRS), ("prob", _FLOATS)])
# An object label -> score: the physical layout of a Parquet map, written as a list of (key, value) structs,
# since `datasets` has no map type; DuckDB and polars read both alike (`map_from_entries` makes it a MAP).
_SCORES = pa.list_(pa.struct([pa.field("key", _STR, nullable=False), pa.field("value", _FLOAT)]))

# The fields a run may keep, by corpus, with their Arrow types (docs/hplt-mapping.md "Annotations").
_COMMON = {
    "f": _STR, "o": _INT, "s": _INT, "rs": _INT, "c": _STR, "ts": _STR, "de": _STR, "crawl_id": _STR,
    "xml": _STR, "cluster_size": _INT, "filter": _STR, "pii": pa.list_(pa.list_(_INT)),
    "doc_scores": _FLOATS, "web-register": _SCORES,
}
FIELD_TYPES: dict[str, dict[str, pa.DataType]] = {
    "v3": {**_COMMON, "lang": _STRS, "prob": _FLOATS, "seg_langs": _STRS, "html_lang": _STRS, "collection": _STR},
    "v4": {**_COMMON, "md": _STR, "openlid_v3": _LID, "openlid_v2": _LID, "glotlid_v3": _LID,
           "seg_langs_openlid_v3": _STRS, "noise": _STR, "htmllang": _STRS, "metalang": _STRS, "allowed": _BOOL,
           "bsc-edu": _FLOAT, "finepdfs-edu": _FLOAT, "fineweb2-hq": _FLOAT, "jql": _FLOAT,
           "propella-4b": _STR},  # an object of mixed value types: kept as its JSON text
}
JSON_TEXT_FIELDS = frozenset({"propella-4b"})
ALIASES = {"openlid_v3": "openlid-v3", "openlid_v2": "openlid-v2", "glotlid_v3": "glotlid-v3"}  # v4 pool spelling

# Named sets of fields, expanded in the order given (duplicates once).
PRESETS: dict[str, dict[str, tuple[str, ...]]] = {
    "v3": {"quality": ("doc_scores",), "register": ("web-register",), "lid": ("lang", "prob", "seg_langs")},
    "v4": {"quality": ("doc_scores",), "register": ("web-register",),
           "lid": ("openlid_v3", "glotlid_v3", "seg_langs_openlid_v3")},
}


class UnknownField(ValueError):
    """--annotations names something that is neither a preset nor a field of the corpus' records."""

    def __init__(self, name: str, corpus: str) -> None:
        self.name, self.corpus = name, corpus
        super().__init__(f"--annotations: {name!r} is not a field of HPLT {corpus} records nor a preset; presets: "
                         f"{', '.join(PRESETS[corpus])}; fields: {', '.join(FIELD_TYPES[corpus])}")


def resolve_fields(spec: str, corpus: str) -> tuple[str, ...]:
    """The fields a comma-separated --annotations value names (presets expanded), in order, each once."""
    fields: list[str] = []
    for word in (w.strip() for w in spec.split(",")):
        if not word:
            continue
        names = PRESETS[corpus].get(word) or ((word,) if word in FIELD_TYPES[corpus] else None)
        if names is None:
            raise UnknownField(word, corpus)
        fields += [n for n in names if n not in fields]
    return tuple(fields)


def _is_int(v: object) -> bool:
    return v.__class__ is int and -(1 << 63) <= v < (1 << 63)  # type: ignore[operator]


def _is_float(v: object) -> bool:
    return (v.__class__ is float and math.isfinite(v)) or _is_int(v)  # type: ignore[arg-type]


def _same(v: object) -> object:
    return v


def _fits(t: pa.DataType):  # noqa: ANN202
    """A check that a JSON value (not None) is of Arrow type `t` as this module types fields: built once per
    field (`_field`), since comparing Arrow types per value cost most of a record's time."""
    if t == _STR:
        return lambda v: v.__class__ is str
    if t == _INT:
        return _is_int
    if t == _FLOAT:
        return _is_float
    if t == _BOOL:
        return lambda v: v.__class__ is bool
    if t == _SCORES:
        return lambda v: v.__class__ is dict and all(map(_is_float, v.values()))
    if pa.types.is_struct(t):
        members = {f.name: _fits(f.type) for f in t}
        return lambda v: v.__class__ is dict and all(k in members and (x is None or members[k](x)) for k, x in v.items())
    item = _fits(t.value_type)
    return lambda v: v.__class__ is list and all(map(item, v))


def _typed(t: pa.DataType):  # noqa: ANN202
    """A fitting value as the column holds it: ints of a float column as floats (JSON does not tell 1 from 1.0)."""
    if t == _FLOAT:
        return float
    if pa.types.is_list(t) and t.value_type == _FLOAT:
        return lambda v: [float(x) for x in v]
    if t == _SCORES:
        return lambda v: {k: float(x) for k, x in v.items()}  # an object in the spill: compact
    if pa.types.is_struct(t):
        members = {f.name: _typed(f.type) for f in t}
        return lambda v: {k: None if x is None else members[k](x) for k, x in v.items()}
    return _same


@functools.cache
def _field(corpus: str, name: str):  # noqa: ANN202
    """(type, check, conversion) of one field."""
    t = FIELD_TYPES[corpus][name]
    return t, _fits(t), _typed(t)


def annotation_values(obj: dict, fields: tuple[str, ...], corpus: str) -> bytes | tuple[str, str]:
    """The kept fields of one parsed record as the spill carries them (a JSON list, null where absent), or
    ("annotation_type", detail) when a value is not of its field's type."""
    out = []
    for name in fields:
        v = obj.get(name)
        if v is None and name in ALIASES:
            v = obj.get(ALIASES[name])
        if v is not None and name in JSON_TEXT_FIELDS:
            v = orjson.dumps(v).decode() if v.__class__ is dict else v
        if v is None:
            out.append(None)
            continue
        t, fits, typed = _field(corpus, name)
        if not fits(v):
            return "annotation_type", f"{name!r} is {_shape(v)}, --annotations keeps it as {t}"
        out.append(typed(v))
    return orjson.dumps(out)


@functools.cache
def scan_keys(fields: tuple[str, ...]) -> tuple[bytes, ...]:
    """The keys the native scan keeps for `fields`: each field's, then the pool spellings of those that have one."""
    return tuple(f.encode() for f in fields) + tuple(ALIASES[f].encode() for f in fields if f in ALIASES)


def from_scan(raw: bytes, fields: tuple[str, ...], corpus: str) -> bytes | tuple[str, str]:
    """`annotation_values` of the JSON array the native scan kept for a record (`scan_keys` order, null where
    absent): the values orjson reads in the line, since they are the line's own checked bytes."""
    return annotation_values(dict(zip(_scan_names(fields), orjson.loads(raw))), fields, corpus)


@functools.cache
def _scan_names(fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(k.decode() for k in scan_keys(fields))


def _shape(v: object) -> str:
    try:
        text = orjson.dumps(v).decode()
    except TypeError:  # nested deeper than orjson writes: its type says enough
        return f"a {type(v).__name__} nested too deep to show"
    return f"{type(v).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def schema_of(fields: tuple[str, ...], corpus: str) -> pa.Schema:
    """An annotation file's schema: the shard's id first, then each kept field, nullable, in the order asked."""
    return pa.schema([pa.field("id", _STR, nullable=False)]
                     + [pa.field(column_name(n), FIELD_TYPES[corpus][n]) for n in fields])


def annotation_table(ids: pa.Array, values: pa.Array, fields: tuple[str, ...], corpus: str) -> pa.Table:
    """The annotation rows of one row group: ids as in the shard, values from the spill's JSON lists."""
    schema = schema_of(fields, corpus)
    rows = [orjson.loads(b) for b in values.to_pylist()]
    columns = []
    for k in range(len(fields)):
        t = schema.field(k + 1).type
        values = [r[k] for r in rows]
        if t == _SCORES:
            values = [None if v is None else [{"key": a, "value": b} for a, b in v.items()] for v in values]
        columns.append(pa.array(values, t))
    return pa.Table.from_arrays([ids.cast(_STR), *columns], schema=schema)


class AbsentField(ValueError):
    """A field --annotations names that no record of the probed heads carries: a refusal at --dry-run."""

    def __init__(self, name: str, locations: list[str], records: int, carried: list[str]) -> None:
        self.name, self.locations, self.carried = name, locations, carried
        shown = ", ".join(locations[:2]) + (", ..." if len(locations) > 2 else "")
        super().__init__(f"--annotations: none of the first {records} records of {len(locations)} input shard(s) "
                         f"({shown}) carries {name!r}; they carry: {', '.join(carried)}; leave it out or name one "
                         "of these")


def probe_fields(heads: list[tuple[str, list[dict]]], fields: tuple[str, ...]) -> float:
    """Refuse (AbsentField) a field no probed record carries; else the mean bytes per record of the kept fields
    as the spill carries them (the dry-run's extra volume). `heads`: (location, parsed records) per shard."""
    records = [obj for _, objs in heads for obj in objs if isinstance(obj, dict)]
    carried = {k for obj in records for k in obj}
    for name in fields:
        if records and name not in carried and ALIASES.get(name) not in carried:
            raise AbsentField(name, [loc for loc, _ in heads], len(records), sorted(carried))
    sizes = [len(orjson.dumps([obj.get(n, obj.get(ALIASES.get(n, n))) for n in fields])) for obj in records]
    return sum(sizes) / len(sizes) if sizes else 0.0
