"""One line of an HPLT shard -> an :class:`HpltRecord`, or the reason it is a bad record.

Two decoders, one contract. The strict path (orjson, then checks in Python) is the reference:
it decides every line the fast path does not accept and names the reason of every bad line.
The fast path (msgspec into a typed ``Struct`` holding only the fields hplt-shard reads) skips
the other fields without building Python objects for them; what it accepts, the strict path
accepts with the same values, because:

- the Struct's types and the Python checks after it are the strict path's checks, and any
  msgspec error (syntax, type, missing field, lone surrogate, depth) sends the line to the
  strict path;
- the two things msgspec does not check in the fields it skips, UTF-8 validity and numbers
  beyond double range, are checked per batch of lines by :func:`batch_is_plain` (Arrow's UTF-8
  validator over the batch's bytes, and a regex for a number with a 3-digit exponent or 100
  digits in a row); a batch that fails either goes line by line through the strict path.

``tests/test_decoder_diff.py`` checks the two paths against each other on many tricky lines.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import NamedTuple

import msgspec
import orjson

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


def strict_record(raw: bytes | bytearray, line: int, v4: bool) -> HpltRecord | tuple[str, str]:
    """The reference decoder: the record of one line (newline included or not), or (reason, detail)."""
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
    return HpltRecord(line, obj["id"], obj["text"], obj["u"], lang, 0 if pii is None else len(pii))


def without_newline(raw: bytes | bytearray) -> bytes | bytearray:
    """The line as it stands in the file, without its terminator."""
    return raw[:-1] if raw[-1:] == b"\n" else raw


# --------------------------------------------------------------------------
# The fast path: msgspec into typed Structs, unused fields skipped


class _Lid(msgspec.Struct, gc=False):
    lang: list[str] | None = None


class _V4(msgspec.Struct, gc=False):
    id: str
    text: str
    u: str
    pii: list[msgspec.Raw] | None = None
    openlid_v3: _Lid | None = None
    openlid_dash: _Lid | None = msgspec.field(default=None, name="openlid-v3")


class _V3(msgspec.Struct, gc=False):
    id: str
    text: str
    u: str
    pii: list[msgspec.Raw] | None = None
    lang: list[str] | None = None


FastError = (msgspec.DecodeError,)  # ValidationError is a DecodeError


def fast_decoder(v4: bool):
    """``decode(raw)`` -> a Struct with id, text, u, pii and the language field(s); raises FastError."""
    return msgspec.json.Decoder(_V4 if v4 else _V3).decode


# A JSON number beyond double range (orjson refuses it, msgspec's skip does not look) has a
# 3-digit exponent or at least 210 digits before its exponent: either way one of these matches.
_BIG_NUMBER = re.compile(rb"[:,\[]\s*-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{3}|[0-9]{100}")


def batch_is_plain(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` (whole lines) is valid UTF-8 and holds no number that could pass double range.

    Then msgspec's skipped fields hide nothing the strict path would refuse. Arrow validates
    UTF-8 without building a str (3 GB/s here against 1.6 for ``bytes.decode``).
    """
    import pyarrow as pa  # noqa: PLC0415 (the stages that read already hold it; the reader alone need not)

    n = len(data)
    if not n:
        return True
    offsets = pa.py_buffer(b"\0\0\0\0" + n.to_bytes(4, "little")) if n < 1 << 31 else None
    try:
        if offsets is None:
            bytes(data).decode("utf-8")
        else:
            pa.StringArray.from_buffers(1, offsets, pa.py_buffer(data)).validate(full=True)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return False
    return _BIG_NUMBER.search(data) is None
