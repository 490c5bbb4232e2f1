"""One line of an HPLT shard -> an :class:`HpltRecord`, or the reason it is a bad record.

The strict path (orjson, then checks in Python) is the reference: it decides every line the fast path
(msgspec into a typed ``Struct``) does not accept. The fast path accepts a line only when the strict path
would give the same values: the Struct declares every HPLT key (an unknown one, which msgspec would skip
unchecked, goes to the strict path), every number is ``float`` (refusing what orjson refuses), and any
msgspec error or failed check goes to the strict path. ``tests/unit/input/test_decoder_diff.py`` compares them.
"""

from __future__ import annotations

import json
import unicodedata
from typing import NamedTuple

import msgspec
import orjson

from shard_pipeline.input.annotations import annotation_values
from shard_pipeline.input.failures import short

MAX_ID_CHARS = 4096  # ids are sort keys held by the plan; a huge one is a broken record


class HpltRecord(NamedTuple):
    """The fields the pipeline keeps from one HPLT line (see docs/hplt-mapping.md)."""

    line: int
    id: str
    text: str
    url: str
    lang: str
    pii_count: int
    annotations: bytes | None = None  # the --annotations fields, as input/annotations.py carries them


# --------------------------------------------------------------------------
# The strict path: orjson, then every check in Python


def _has_surrogate(value: object) -> bool:
    """True when a parsed value holds a lone surrogate anywhere (keys included)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unparsable(raw: bytes | bytearray, orjson_error: Exception) -> tuple[str, str]:
    """Why orjson refused a line: checked independently of orjson's messages."""
    if not raw.strip(b" \t\r"):
        return "empty_line", "blank line" if raw else "empty line"
    data = bytes(raw)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return "invalid_utf8", f"byte 0x{data[e.start]:02x} at offset {e.start} ({e.reason})"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        return "not_json", short(str(e))
    if _has_surrogate(value):
        return "lone_surrogate", short(str(orjson_error))
    return "not_json", short(str(orjson_error))  # e.g. NaN, Infinity, 1e400, nesting depth


def _bad_id_chars(value: str) -> bool:
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return True
    return False


def field_problem(obj: object) -> tuple[str, str] | None:
    """The first field problem of a parsed line, or None if it is a good record."""
    if not isinstance(obj, dict):
        return "not_object", f"JSON {type(obj).__name__}, expected an object"
    if "id" not in obj:
        return "missing_id", "no 'id' field"
    id_ = obj["id"]
    if not isinstance(id_, str):
        return "id_not_string", f"'id' is {type(id_).__name__}: {short(repr(id_))}"
    if not id_:
        return "bad_id", "'id' is empty"
    if len(id_) > MAX_ID_CHARS:
        return "bad_id", f"'id' has {len(id_)} characters (at most {MAX_ID_CHARS})"
    if _bad_id_chars(id_):
        return "bad_id", f"'id' contains control characters: {short(ascii(id_))}"
    if "text" not in obj:
        return "missing_text", "no 'text' field"
    text = obj["text"]
    if not isinstance(text, str):
        return "text_not_string", f"'text' is {type(text).__name__}"
    if "u" not in obj:
        return "missing_u", "no 'u' field (the document URL)"
    url = obj["u"]
    if not isinstance(url, str):
        return "u_not_string", f"'u' is {type(url).__name__}: {short(repr(url))}"
    if not url:
        return "empty_u", "'u' is an empty string"
    pii = obj.get("pii")
    if pii is not None and not isinstance(pii, list):
        return "pii_not_list", f"'pii' is {type(pii).__name__}"
    return None


def _first_lang(langs: object) -> str:
    if langs.__class__ is list and langs and langs[0].__class__ is str and langs[0]:  # type: ignore[attr-defined]
        return langs[0]  # type: ignore[index]
    return "und"


def strict_record(raw: bytes | bytearray, line: int, v4: bool,
                  fields: tuple[str, ...] = ()) -> HpltRecord | tuple[str, str]:
    """The reference decoder: the record of one line (newline included or not), or (reason, detail);
    with `fields`, the record carries those annotations (input/annotations.py)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return _unparsable(without_newline(raw), e)
    problem = field_problem(obj)
    if problem is not None:
        return problem
    pii = obj.get("pii")
    if v4:
        lid = obj.get("openlid_v3")
        if lid is None:
            lid = obj.get("openlid-v3")
        lang = _first_lang(lid.get("lang") if lid.__class__ is dict else None)
    else:
        lang = _first_lang(obj.get("lang"))
    kept = None
    if fields:
        kept = annotation_values(obj, fields, "v4" if v4 else "v3")
        if kept.__class__ is tuple:
            return kept  # type: ignore[return-value]
    return HpltRecord(line, obj["id"], obj["text"], obj["u"], lang, 0 if pii is None else len(pii), kept)  # type: ignore[arg-type]


def without_newline(raw: bytes | bytearray) -> bytes | bytearray:
    """The line as it stands in the file, without its terminator."""
    return raw[:-1] if raw[-1:] == b"\n" else raw


# --------------------------------------------------------------------------
# The fast path: msgspec into typed Structs that declare every field of the HPLT schema


class _Lid(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    lang: list[str] | None = None
    prob: list[float] | None = None


def _named(name: str):  # noqa: ANN202
    return msgspec.field(default=None, name=name)


class _V4(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """Every key of an HPLT v4 record (docs/hplt-mapping.md); another key sends the line to the strict path."""

    id: str
    text: str
    u: str
    pii: list[list[float]] | None = None
    openlid_v3: _Lid | None = None
    openlid_dash: _Lid | None = _named("openlid-v3")
    f: str | None = None
    o: float | None = None
    s: float | None = None
    rs: float | None = None
    c: str | None = None
    ts: str | None = None
    de: str | None = None
    crawl_id: str | None = None
    xml: str | None = None
    md: str | None = None
    openlid_v2: _Lid | None = None
    glotlid_v3: _Lid | None = None
    seg_langs_openlid_v3: list[str] | None = None
    cluster_size: float | None = None
    filter: str | None = None
    noise: str | None = None
    doc_scores: list[float] | None = None
    web_register: dict[str, float] | None = _named("web-register")
    htmllang: list[str] | None = None
    metalang: list[str] | None = None
    allowed: bool | None = None
    bsc_edu: float | None = _named("bsc-edu")
    finepdfs_edu: float | None = _named("finepdfs-edu")
    fineweb2_hq: float | None = _named("fineweb2-hq")
    jql: float | None = None
    propella_4b: dict[str, str | float | bool | None] | None = _named("propella-4b")


class _V3(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """Every key of an HPLT v3 record."""

    id: str
    text: str
    u: str
    pii: list[list[float]] | None = None
    lang: list[str] | None = None
    prob: list[float] | None = None
    f: str | None = None
    o: float | None = None
    s: float | None = None
    rs: float | None = None
    c: str | None = None
    ts: str | None = None
    de: str | None = None
    crawl_id: str | None = None
    collection: str | None = None
    xml: str | None = None
    html_lang: list[str] | None = None
    seg_langs: list[str] | None = None
    cluster_size: float | None = None
    filter: str | None = None
    doc_scores: list[float] | None = None
    web_register: dict[str, float] | None = _named("web-register")


FastError = msgspec.DecodeError  # ValidationError is a DecodeError


def fast_decoder(v4: bool):  # noqa: ANN201
    """``decode(raw)`` -> a Struct with id, text, u, pii and the language field(s); raises FastError."""
    return msgspec.json.Decoder(_V4 if v4 else _V3).decode
