"""The quarantine policy (``--clean``): pure checks that set aside broken documents, never edit them.

Each rule is a conservative check on one document's text; a document that matches any is quarantined
whole (kept verbatim elsewhere, counted by reason), and no kept document is rewritten. The rules are the
reference "conservative v2 policy"; the other defaults let any normal web page in any language pass
(tests/unit/stages/test_clean_policy.py).

Exact rules (``n`` = ``len(text)`` in code points, ``B`` = UTF-8 bytes, lines = ``text`` split
on ``"\\n"``, empty lines ignored; comparisons in IEEE doubles exactly as written):

| reason | matches when |
|---|---|
| ``max_bytes`` | ``B > max_bytes`` |
| ``repeated_lines`` | non-empty lines ``L >= repeated_lines_min_lines`` and distinct non-empty lines ``<= repeated_lines_max_unique_ratio * L`` |
| ``one_line`` | ``B >= one_line_min_bytes`` and the longest line's UTF-8 bytes ``>= one_line_share * B`` |
| ``control_chars`` | characters in U+0000-U+0008, U+000B, U+000C, U+000E-U+001F, U+007F (C0 controls and DEL, not ``\\t \\n \\r``) ``> control_char_ratio * n`` |
| ``char_run`` | some character repeated consecutively more than ``max_char_run`` times |
| ``replacement_chars`` | U+FFFD count ``>= replacement_min_chars`` and ``> replacement_ratio * n`` |
| ``whitespace_padding`` | ``n >= whitespace_min_chars``, ``str.isspace`` characters ``> whitespace_ratio * n`` and ``str.isalnum`` characters ``< alnum_ratio_below * n`` |
| ``base64_blob`` | a run of at least ``base64_min_run`` characters from ``[A-Za-z0-9+/=]`` |

Speed: the common case costs one ``bytes.translate`` pass over the UTF-8 bytes and a memchr for U+FFFD,
about what hashing the text costs; every other rule is gated by a length check, and runs are found by
probing every k-th position, never by a regex that restarts at each position.
"""
from __future__ import annotations

import difflib
import math
import re
import string
from dataclasses import dataclass, fields
from typing import Mapping

import numpy as np

REASONS: tuple[str, ...] = (
    "max_bytes",
    "repeated_lines",
    "one_line",
    "control_chars",
    "char_run",
    "replacement_chars",
    "whitespace_padding",
    "base64_blob",
)

CONF_PREFIX = "CLEAN_"


@dataclass(frozen=True)
class CleanPolicy:
    """Thresholds of the quarantine rules (module docstring); defaults are the conservative policy."""

    max_bytes: int = 64 * 1024 * 1024
    repeated_lines_min_lines: int = 200
    repeated_lines_max_unique_ratio: float = 0.1
    one_line_min_bytes: int = 1_000_000
    one_line_share: float = 0.95
    control_char_ratio: float = 0.01
    max_char_run: int = 10_000
    replacement_ratio: float = 0.01
    replacement_min_chars: int = 100
    whitespace_min_chars: int = 10_000
    whitespace_ratio: float = 0.5
    alnum_ratio_below: float = 0.2
    base64_min_run: int = 100_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(f.default, int):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"clean policy: {f.name} must be an int >= 1, got {value!r}")
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
                    raise ValueError(f"clean policy: {f.name} must be a number in [0, 1], got {value!r}")

    def to_json(self) -> dict:
        """Every threshold, in field order: what the manifest and the dataset card record."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_conf(values: Mapping[str, str]) -> "CleanPolicy":
        """The policy from ``CLEAN_<FIELD>`` conf keys, other keys ignored: integers in decimal digits, ratios
        in [0, 1]; an unknown ``CLEAN_*`` key is an error (a typo must not silently keep a default)."""
        by_key = {conf_key(f.name): f for f in fields(CleanPolicy)}
        kwargs: dict[str, int | float] = {}
        for key, raw in values.items():
            if not key.startswith(CONF_PREFIX):
                continue
            f = by_key.get(key)
            if f is None:
                close = difflib.get_close_matches(key, list(by_key), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise ValueError(f"unknown clean policy key {key}{hint}")
            text = str(raw).strip()
            if isinstance(f.default, int):
                if not re.fullmatch(r"[0-9]+", text):
                    raise ValueError(f"{key}: expected a positive integer, got {raw!r}")
                value: int | float = int(text)
            else:
                if not re.fullmatch(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?", text):
                    raise ValueError(f"{key}: expected a number in [0, 1], got {raw!r}")
                value = float(text)
            try:
                CleanPolicy(**{f.name: value})
            except ValueError as exc:
                raise ValueError(f"{key}: {str(exc).split(': ', 1)[1]}") from None
            kwargs[f.name] = value
        return CleanPolicy(**kwargs)


def conf_key(field_name: str) -> str:
    """``max_char_run`` -> ``CLEAN_MAX_CHAR_RUN``."""
    return CONF_PREFIX + field_name.upper()


CONF_KEYS: dict[str, str] = {
    "CLEAN_MAX_BYTES": "--clean: quarantine a document over this many UTF-8 bytes (default 67108864 = 64 MiB)",
    "CLEAN_REPEATED_LINES_MIN_LINES": "--clean: repeated-line rule applies from this many non-empty lines (default 200)",
    "CLEAN_REPEATED_LINES_MAX_UNIQUE_RATIO": "--clean: ... and matches when distinct lines are at most this share (default 0.1)",
    "CLEAN_ONE_LINE_MIN_BYTES": "--clean: one-line rule applies from this many UTF-8 bytes (default 1000000)",
    "CLEAN_ONE_LINE_SHARE": "--clean: ... and matches when the longest line holds at least this share of the bytes (default 0.95)",
    "CLEAN_CONTROL_CHAR_RATIO": "--clean: quarantine when control characters (not tab/newline/CR) exceed this share (default 0.01)",
    "CLEAN_MAX_CHAR_RUN": "--clean: quarantine a run of one character longer than this (default 10000)",
    "CLEAN_REPLACEMENT_RATIO": "--clean: quarantine when U+FFFD exceeds this share of characters ... (default 0.01)",
    "CLEAN_REPLACEMENT_MIN_CHARS": "--clean: ... and there are at least this many U+FFFD (default 100)",
    "CLEAN_WHITESPACE_MIN_CHARS": "--clean: whitespace-padding rule applies from this many characters (default 10000)",
    "CLEAN_WHITESPACE_RATIO": "--clean: ... matches when whitespace exceeds this share ... (default 0.5)",
    "CLEAN_ALNUM_RATIO_BELOW": "--clean: ... and letters/digits are below this share (default 0.2)",
    "CLEAN_BASE64_MIN_RUN": "--clean: quarantine a run of at least this many [A-Za-z0-9+/=] characters (default 100000)",
}
assert list(CONF_KEYS) == [conf_key(f.name) for f in fields(CleanPolicy)]


def summary(policy: CleanPolicy, quarantined: int, reasons: Mapping[str, int]) -> dict:
    """What the manifest and ``card.dataset_card(policy=...)`` take: thresholds, and counts per reason (in
    ``REASONS`` order; one document can match several, so they may sum to more than ``quarantined``)."""
    unknown = set(reasons) - set(REASONS)
    if unknown:
        raise ValueError(f"unknown quarantine reasons {sorted(unknown)}")
    return {
        "thresholds": policy.to_json(),
        "quarantined": int(quarantined),
        "reasons": {r: int(reasons.get(r, 0)) for r in REASONS},
    }


# ---------------------------------------------------------------- the checks

_CTRL_NL = bytes(range(0x00, 0x09)) + b"\n\x0b\x0c" + bytes(range(0x0E, 0x20)) + b"\x7f"  # controls + newline
_ASCII_SPACE = bytes(c for c in range(128) if chr(c).isspace())
_B64_CHARS = (string.ascii_letters + string.digits + "+/=").encode("ascii")
_B64_MEMBER = frozenset(_B64_CHARS)
# str.isspace() code points all lie below U+3001; the last slot stands for "anything above".
_SPACE_LUT = np.zeros(0x3002, dtype=bool)
_SPACE_LUT[[c for c in range(0x3001) if chr(c).isspace()]] = True
_NOT_ALNUM_RUN = re.compile(r"[\W_]+")  # \w is str.isalnum() or "_" for str patterns
_SHORT_RUN_LIMIT = 64  # below this, a backreference regex is cheaper than probing


def _space_bound(arr: np.ndarray, ascii_only: bool) -> int:
    """An upper bound of the ``str.isspace`` characters, from the UTF-8 bytes, in a few SIMD passes.

    ASCII whitespace is at most the bytes <= 0x20. Every non-ASCII whitespace character is
    U+0085 or U+00A0 (lead byte C2), U+1680 (E1), U+2000-U+205F (E2) or U+3000 (E3 80 80): one
    lead byte each, and for U+3000 the pair E3 80 (so kana, E3 81-83, do not count).
    """
    bound = int(np.count_nonzero(arr <= 0x20))
    if not ascii_only:
        bound += int(np.count_nonzero(arr == 0xC2)) + int(np.count_nonzero((arr - np.uint8(0xE1)) < 2))
        bound += int(np.count_nonzero((arr[:-1] == 0xE3) & (arr[1:] == 0x80)))
    return bound


def _count_space(text: str) -> int:
    """Exact count of ``str.isspace`` characters, vectorised over the code points."""
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    return int(np.count_nonzero(_SPACE_LUT[np.minimum(cp, 0x3001)]))


def _has_char_run(text: str, need: int) -> bool:
    """True if some character occurs ``need`` times in a row: any ``need`` consecutive positions hold a
    multiple of ``need``, so probing those finds every run, each probe O(1) unless a neighbour is equal."""
    n = len(text)
    if n < need:
        return False
    if need <= _SHORT_RUN_LIMIT:
        return re.search(r"(.)\1{%d}" % (need - 1), text, re.DOTALL) is not None
    for p in range(0, n, need):
        c = text[p]
        if not ((p > 0 and text[p - 1] == c) or (p + 1 < n and text[p + 1] == c)):
            continue
        if _run_through(text, p, need, c) >= need:
            return True
    return False


def _has_base64_run(raw: bytes, need: int) -> bool:
    """True if ``raw`` has ``need`` consecutive bytes from ``[A-Za-z0-9+/=]`` (same probing)."""
    n = len(raw)
    if n < need:
        return False
    for p in range(0, n, need):
        if raw[p] not in _B64_MEMBER:
            continue
        if _run_through(raw, p, need, _B64_CHARS) >= need:
            return True
    return False


def _run_through(seq: str | bytes, p: int, need: int, chars) -> int:
    """Length of the run of `chars` through position `p`, looking at most `need` - 1 positions each way."""
    left = seq[max(0, p - need + 1) : p + 1]
    right = seq[p : p + need]
    return len(left) - len(left.rstrip(chars)) + len(right) - len(right.lstrip(chars)) - 1


def quarantine_reasons(text: str, text_bytes: int, policy: CleanPolicy, *, utf8: bytes | None = None) -> tuple[str, ...]:
    """Every rule ``text`` matches, in ``REASONS`` order; ``()`` for a clean document. ``text_bytes`` is its
    UTF-8 length (a disagreeing one is a ValueError), ``utf8`` those bytes when at hand (saves an encode)."""
    p = policy
    raw = utf8 if utf8 is not None else text.encode("utf-8", "surrogatepass")
    nbytes = len(raw)
    if nbytes != text_bytes:
        raise ValueError(f"text_bytes {text_bytes} is not the text's UTF-8 length {nbytes}")
    n = len(text)
    found: list[str] = ["max_bytes"] if nbytes > p.max_bytes else []
    # Count control characters and newlines together in one pass; separate them only if either
    # could be over its threshold (each is <= the joint count).
    ctrl_limit = p.control_char_ratio * n
    both = nbytes - len(raw.translate(None, _CTRL_NL))
    newlines = raw.count(b"\n") if both > ctrl_limit or both + 1 >= p.repeated_lines_min_lines else 0
    found += _line_reasons(raw, newlines, p)
    if both - newlines > ctrl_limit:  # newlines uncounted (0) only where both <= ctrl_limit
        found.append("control_chars")
    if n > p.max_char_run and _has_char_run(text, p.max_char_run + 1):
        found.append("char_run")
    # `in` finds a character with memchr (fast); count only when there is one
    if n >= p.replacement_min_chars and not text.isascii() and "\ufffd" in text:
        bad = text.count("\ufffd")
        if bad >= p.replacement_min_chars and bad > p.replacement_ratio * n:
            found.append("replacement_chars")
    if n >= p.whitespace_min_chars and _whitespace_padding(text, raw, p):
        found.append("whitespace_padding")
    if n >= p.base64_min_run and _has_base64_run(raw, p.base64_min_run):
        found.append("base64_blob")
    return tuple(found)


def _line_reasons(raw: bytes, newlines: int, p: CleanPolicy) -> list[str]:
    """``repeated_lines`` and ``one_line``: lines are split once, and only when a rule may match."""
    found, lines = [], None
    if newlines + 1 >= p.repeated_lines_min_lines:
        lines = raw.split(b"\n")
        nonempty = len(lines) - lines.count(b"")
        if nonempty >= p.repeated_lines_min_lines:
            distinct = set(lines)
            distinct.discard(b"")
            if len(distinct) <= p.repeated_lines_max_unique_ratio * nonempty:
                found.append("repeated_lines")
    if len(raw) >= p.one_line_min_bytes:
        if lines is None:
            lines = raw.split(b"\n")
        if max(map(len, lines)) >= p.one_line_share * len(raw):
            found.append("one_line")
    return found


def _whitespace_padding(text: str, raw: bytes, p: CleanPolicy) -> bool:
    """Mostly whitespace and few letters or digits; a cheap bound first, counting only when it may match."""
    n = len(text)
    space_limit = p.whitespace_ratio * n
    if _space_bound(np.frombuffer(raw, dtype=np.uint8), text.isascii()) <= space_limit:
        return False
    space = len(raw) - len(raw.translate(None, _ASCII_SPACE)) if text.isascii() else _count_space(text)
    return space > space_limit and len(_NOT_ALNUM_RUN.sub("", text)) < p.alnum_ratio_below * n
