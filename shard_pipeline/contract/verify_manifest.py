"""--verify, the manifest half: its schema, structure, key order, no timestamps; the shared report types."""
from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.commands import command, program
from shard_pipeline.contract.manifest import MANIFEST_FORMAT, MANIFEST_NAME, build_manifest
from shard_pipeline.contract.rules import SPLIT_LAYOUTS, SPLITS, ShardFile, shard_name
from shard_pipeline.files import sha256_of
from shard_pipeline.paths import MANIFEST_SCHEMA

ROW_PROBLEM_CAP = 20  # row-level problems reported per kind; the rest are counted

# A date with a time of day, ISO 8601 or RFC 2822 style, anywhere in a string value.
_TIMESTAMP_VALUE = re.compile(
    r"\d{4}-\d{2}-\d{2}[T _]\d{2}:\d{2}"
    r"|\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4} \d{2}:\d{2}",
)
# Keys that name a moment in time (matched on words split at _ - . and camelCase).
_TIMESTAMP_KEY_WORDS = {"time", "timestamp", "date", "datetime", "created", "modified", "mtime",
                        "ctime", "atime", "updated", "generated", "written", "started", "finished", "at"}


@dataclass(frozen=True)

class Problem:
    file: str  # path relative to OUT (or "_MANIFEST.json")
    what: str  # one line: what is wrong
    unreadable: bool = False  # this user may not read it: unchecked, not shown to break the contract

    def __str__(self) -> str:
        return f"{self.file}: {self.what}"


class _Report:
    """Collects problems; row-level ones are capped per kind."""

    def __init__(self, cap: int = ROW_PROBLEM_CAP):
        self.problems: list[Problem] = []
        self._cap = cap
        self._seen: Counter[str] = Counter()
        self._first_dropped: dict[str, str] = {}

    def add(self, file: str, what: str) -> None:
        self.problems.append(Problem(file, _one_line(what)))

    def denied(self, file: str, path: Path, exc: OSError) -> None:
        """A file this user may not read (a colleague's output): one line with the way on, not a defect."""
        from shard_pipeline.access import access_step

        self.problems.append(Problem(file, f"cannot be read by this user ({exc.strerror}), so it was not checked; "
                                           f"{access_step(path, reading=True)}", unreadable=True))

    def capped(self, kind: str, file: str, what: str) -> None:
        self._seen[kind] += 1
        if self._seen[kind] <= self._cap:
            self.add(file, what)
        else:
            self._first_dropped.setdefault(kind, file)

    def finish(self) -> list[Problem]:
        for kind, file in self._first_dropped.items():
            more = self._seen[kind] - self._cap
            self.add(file, f"... and {more} more {kind} problems (from this file on)")
        self._first_dropped.clear()
        return self.problems


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(s: Any, limit: int = 60) -> str:
    r = repr(s)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _stream_sha256(path: Path) -> tuple[int, str]:
    """(size, hex sha256) of the bytes actually read, block by block."""
    with open(path, "rb") as f:
        return sha256_of(f)


# ---------------------------------------------------------------- 1. the manifest


def _expected_key_orders() -> dict[str, list[str]]:
    """The documented key orders, taken from build_manifest itself."""
    entry = ShardFile(shard_name(0, 1), 0, 1, "0" * 64, 0, 0, 0)
    m = build_manifest(dataset="", version="", config_sha256="0" * 64, shard_rows=1, val_permille=0,
                       row_group_bytes=1, shards=[entry], filters=None, dedup=None, pii={}, ledger_ref="")
    return {
        "": list(m),
        "splits": list(m["splits"]),
        "params": list(m["params"]),
        "shards[]": list(m["shards"][0]),
        "counts": list(m["counts"]),
        "counts.dedup": list(m["counts"]["dedup"]),  # defaults first; caller keys may follow
    }


@functools.lru_cache(maxsize=1)
def _schema_validator() -> Any:
    """The validator of the packaged corpus-manifest.schema.json, imported on the first --verify so that
    every other command starts without jsonschema."""
    import jsonschema

    schema = json.loads(MANIFEST_SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_problems(manifest: Any) -> list[str]:
    """Violations of corpus-manifest.schema.json, as 'path: message' sorted by path."""
    errors = sorted(_schema_validator().iter_errors(manifest), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def _structure_problems(m: dict[str, Any]) -> list[str]:
    """What the rest of the verifier needs from the manifest (a subset of the JSON schema)."""
    bad: list[str] = []

    def count(path: str, v: Any, minimum: int = 0, maximum: int | None = None) -> None:
        if not _is_int(v) or v < minimum or (maximum is not None and v > maximum):
            rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            bad.append(f"{path} must be an int {rng}, got {_short(v)}")

    def text(path: str, v: Any) -> None:
        if not isinstance(v, str) or not v:
            bad.append(f"{path} must be a non-empty string, got {_short(v)}")

    count("rows", m.get("rows"))
    count("text_bytes", m.get("text_bytes"))
    splits = m.get("splits")
    if not isinstance(splits, dict):
        bad.append(f"splits must be an object, got {_short(splits)}")
    else:
        for k in SPLITS:
            count(f"splits.{k}", splits.get(k))
    params = m.get("params")
    if not isinstance(params, dict):
        bad.append(f"params must be an object, got {_short(params)}")
    else:
        count("params.shard_rows", params.get("shard_rows"), 1)
        count("params.val_permille", params.get("val_permille"), 0, 1000)
        count("params.row_group_bytes", params.get("row_group_bytes"), 1)
        if "split_layout" in params and params["split_layout"] not in SPLIT_LAYOUTS[1:]:  # column is the key's absence
            bad.append(f"params.split_layout must be one of {list(SPLIT_LAYOUTS[1:])} or absent, "
                       f"got {_short(params.get('split_layout'))}")
    for key, counts, kind in (("shards", ("rows", "bytes", "text_bytes"), "a non-empty list"), ("files", ("bytes",), "a list")):
        entries = m.get(key)
        if not isinstance(entries, list) or (key == "shards" and not entries):
            bad.append(f"{key} must be {kind}, got {_short(entries)}")
            continue
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                bad.append(f"{key}[{i}] must be an object")
                continue
            text(f"{key}[{i}].name", e.get("name"))
            text(f"{key}[{i}].sha256", e.get("sha256"))
            for k in counts:
                count(f"{key}[{i}].{k}", e.get(k))
    return bad


def _key_order_problems(m: dict[str, Any]) -> list[str]:
    orders = _expected_key_orders()
    bad = []

    def same(path: str, obj: Any, expected: list[str], prefix_only: bool = False) -> None:
        if not isinstance(obj, dict):
            return
        keys = list(obj)
        if prefix_only:
            if set(expected) <= set(keys) and keys[: len(expected)] != expected:
                bad.append(f"keys of {path} are not in the documented order: {keys}, expected {expected} first")
        elif set(keys) == set(expected) and keys != expected:
            bad.append(f"keys of {path or 'the manifest'} are not in the documented order: {keys}, expected {expected}")

    same("", m, orders[""])
    same("splits", m.get("splits"), orders["splits"])
    same("params", m.get("params"), orders["params"], prefix_only=True)  # split_layout follows for dirs
    for i, e in enumerate(m.get("shards") or []):
        same(f"shards[{i}]", e, orders["shards[]"])
    counts = m.get("counts")
    same("counts", counts, orders["counts"])
    if isinstance(counts, dict):
        same("counts.dedup", counts.get("dedup"), orders["counts.dedup"], prefix_only=True)
    pii = m.get("pii")
    if isinstance(pii, dict) and list(pii) != sorted(pii):
        bad.append("keys of pii are not sorted")
    return bad


def _timestamp_problems(obj: Any, path: str = "") -> list[str]:
    """Values or keys that look like a moment in time (the manifest must not vary between runs)."""
    bad = []
    caller_named = path in ("counts.filters", "counts.dedup", "pii")  # keys are the caller's names
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            if not caller_named and _TIMESTAMP_KEY_WORDS & _key_words(str(k)):
                bad.append(f"{sub}: key looks like a timestamp ({_short(v)})")
            else:
                bad.extend(_timestamp_problems(v, sub))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad.extend(_timestamp_problems(v, f"{path}[{i}]"))
    elif isinstance(obj, str) and _TIMESTAMP_VALUE.search(obj):
        bad.append(f"{path}: value looks like a timestamp ({_short(obj)})")
    return bad


def _key_words(key: str) -> set[str]:
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)
    return {w.lower() for w in re.split(r"[_\-. ]+", key) if w}


_FILE_NAME_ERROR = re.compile(r"files/\d+/name: ")


def _no_manifest(out: Path) -> str:
    """Why a folder without a manifest does not verify, and what to give instead (contract/root.py)."""
    from shard_pipeline.contract.root import NO_OUTPUT_HINT, is_root, scan, staged_line

    if is_root(out):
        langs = scan(out).languages
        return (f"missing: OUT holds no manifest; it is a multi-language root ({len(langs)} language outputs: "
                f"{', '.join(langs[:3])}{', ...' if len(langs) > 3 else ''}): {command(program(), '--verify')} OUT checks each")
    try:
        unlanded = scan(out).unlanded if out.is_dir() else ()
    except OSError:
        unlanded = ()
    if unlanded:  # a run of several languages none of which has landed yet
        return (f"missing: OUT holds no manifest and no language output yet: {staged_line(unlanded[0])}"
                + (f" (and {len(unlanded) - 1} more languages)" if len(unlanded) > 1 else ""))
    return f"missing: OUT holds no manifest {NO_OUTPUT_HINT}"


def _check_manifest(out: Path, rep: _Report) -> dict[str, Any] | None:
    """Check check 1; return the manifest when the other checks can use it."""
    path = out / MANIFEST_NAME
    if path.is_symlink():
        rep.add(MANIFEST_NAME, "is a symlink, not a regular file")
    if not path.exists():
        rep.add(MANIFEST_NAME, _no_manifest(out))
        return None
    try:
        raw = path.read_bytes()
    except PermissionError as exc:
        rep.denied(MANIFEST_NAME, path, exc)
        return None
    except OSError as exc:
        rep.add(MANIFEST_NAME, f"cannot be read: {exc}")
        return None
    try:
        m = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        rep.add(MANIFEST_NAME, f"not UTF-8: {exc}")
        return None
    except json.JSONDecodeError as exc:
        rep.add(MANIFEST_NAME, f"not valid JSON: {exc}")
        return None
    if not isinstance(m, dict):
        rep.add(MANIFEST_NAME, f"not a JSON object but a {type(m).__name__}")
        return None
    if m.get("format") != MANIFEST_FORMAT:
        rep.add(MANIFEST_NAME, f"format is {_short(m.get('format'))}, expected {MANIFEST_FORMAT!r}; nothing else checked")
        return None
    schema_errors = schema_problems(m)
    for err in schema_errors:
        if not _FILE_NAME_ERROR.match(err):  # the file check says what is wrong with the name, on the file
            rep.add(MANIFEST_NAME, f"does not match corpus-manifest.schema.json: {err}")
    expected = (json.dumps(m, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if raw != expected:
        at = next((i for i, (a, b) in enumerate(zip(raw, expected)) if a != b), min(len(raw), len(expected)))
        rep.add(MANIFEST_NAME, "not serialized as json.dumps(m, indent=2, ensure_ascii=False) + '\\n' "
                f"(first difference at byte {at})")
    for err in _key_order_problems(m):
        rep.add(MANIFEST_NAME, err)
    for err in _timestamp_problems(m):
        rep.add(MANIFEST_NAME, err)
    structure = _structure_problems(m)
    if structure:
        if not schema_errors:  # the schema, when it ran, has said it already
            for err in structure:
                rep.add(MANIFEST_NAME, err)
        rep.add(MANIFEST_NAME, "too malformed to check the shards against")
        return None
    return m


# ---------------------------------------------------------------- 2. the files


