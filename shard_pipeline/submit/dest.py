"""A publish DEST as rclone reads it (`NAME[,key=value...]:path`, `:backend[,...]:path`, or a local path): its
secrets, masked everywhere it is shown, and where it lands on this machine.

Secrets sit in parameters named so (`pass=`, ...), a URL's userinfo or query, and header values.
"""
from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

SECRET = "***"
_SECRET_KEY = re.compile(r"(pass|secret|key|token|auth|bearer|sas|sig|cookie|credential|session)", re.I)
_HEADER_KEYS = ("headers", "http_headers")
WRAPPERS = ("alias", "crypt", "chunker", "hasher", "compress", "cache")  # backends that write into `remote=`
MAX_DEPTH = 8  # remotes naming remotes: deeper than this is a loop


@dataclass(frozen=True)
class Param:
    key: str
    value: str  # unquoted
    raw: str  # as written, quotes included ("" for a bare `,key`)


@dataclass(frozen=True)
class Dest:
    remote: str | None  # "name" or ":backend"; None for a local path
    params: tuple[Param, ...]
    path: str

    def get(self, key: str) -> str | None:
        found = [p.value for p in self.params if p.key == key]
        return found[-1] if found else None


def is_local(dest: str) -> bool:
    """rclone reads DEST as a local path when no `name:` comes before its first slash."""
    return ":" not in dest.split("/", 1)[0]


def parse(dest: str) -> Dest:
    """DEST split as rclone splits it; a malformed string gives what could be read (rclone refuses it later)."""
    if is_local(dest):
        return Dest(None, (), dest)
    i = 1 if dest.startswith(":") else 0
    while i < len(dest) and dest[i] not in ",:":
        i += 1
    remote, params = dest[:i], []
    while i < len(dest) and dest[i] == ",":
        j = i + 1
        while j < len(dest) and dest[j] not in "=,:":
            j += 1
        key = dest[i + 1:j]
        if j < len(dest) and dest[j] == "=":
            value, raw, j = _value(dest, j + 1)
        else:
            value, raw = "true", ""
        params.append(Param(key, value, raw))
        i = j
    return Dest(remote, tuple(params), dest[i + 1:] if i < len(dest) else "")


def _value(s: str, i: int) -> tuple[str, str, int]:
    """(unquoted value, raw text, end index) of a parameter value starting at s[i]."""
    if i < len(s) and s[i] in "'\"":
        q, j, out = s[i], i + 1, []
        while j < len(s):
            if s[j] == q and s[j + 1:j + 2] == q:
                out.append(q)
                j += 2
            elif s[j] == q:
                return "".join(out), s[i:j + 1], j + 1
            else:
                out.append(s[j])
                j += 1
        return "".join(out), s[i:], len(s)
    j = i
    while j < len(s) and s[j] not in ",:":
        j += 1
    return s[i:j], s[i:j], j


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'" if any(c in value for c in ",:'\"") else value


# ---------------------------------------------------------------- secrets


def mask_url(url: str) -> str:
    """`http://user:pass@host/p?sig=x` -> `http://***@host/p?sig=***`: userinfo and secret query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return SECRET  # not a URL rclone could use either; show nothing of it
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{SECRET}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_KEY.search(k) for k, _ in pairs):
            query = urlencode([(k, SECRET if _SECRET_KEY.search(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The userinfo of a URL (raw and decoded, whole and password) and its secret query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found += [userinfo, unquote(userinfo)]
        if ":" in userinfo:
            password = userinfo.split(":", 1)[1]
            found += [password, unquote(password)]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_KEY.search(k)]
    return found


def _headers(value: str) -> list[list[str]]:
    """rclone's `headers` list: CSV of alternating names and values."""
    try:
        row = next(csv.reader(io.StringIO(value)), [])
    except csv.Error:
        return [[value]]
    return [row[i:i + 2] for i in range(0, len(row), 2)]


def _masked_value(p: Param) -> str | None:
    """The shown value of a parameter, or None when it holds no secret."""
    if _SECRET_KEY.search(p.key):
        return SECRET
    if p.key in _HEADER_KEYS:
        return ",".join(f"{pair[0]},{SECRET}" if len(pair) == 2 else SECRET for pair in _headers(p.value))
    if "://" in p.value:
        shown = mask_url(p.value)
        return shown if shown != p.value else None
    return None


def mask(dest: str) -> str:
    """DEST with every secret replaced by ***, still readable as the same destination."""
    d = parse(dest)
    if d.remote is None:
        return dest
    out = [d.remote]
    for p in d.params:
        shown = _masked_value(p) if p.raw else None  # a bare `,key` is a flag, no value
        out.append(f",{p.key}={p.raw if shown is None else _quoted(shown)}" if p.raw else f",{p.key}")
    return "".join(out) + ":" + d.path


def secrets(dest: str) -> list[str]:
    """Every secret string DEST carries, longest first, as rclone might repeat it in a message."""
    found: list[str] = []
    for p in parse(dest).params:
        if _SECRET_KEY.search(p.key):
            found += [p.value, p.raw]
        elif p.key in _HEADER_KEYS:
            found += [pair[1] for pair in _headers(p.value) if len(pair) == 2] + [p.value]
        elif "://" in p.value:
            found += url_secrets(p.value)
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def mask_text(text: str, dest: str) -> str:
    """A message with DEST and its secrets masked, and the userinfo of any URL in it too."""
    text = text.replace(dest, mask(dest))
    for s in secrets(dest):
        text = text.replace(s, SECRET)
    return " ".join(_mask_token(t) for t in text.split(" "))


def _mask_token(token: str) -> str:
    start = token.find("://")
    if start < 0 or "@" not in token[start:]:
        return token
    begin = start
    while begin > 0 and (token[begin - 1].isalnum() or token[begin - 1] in "+-."):
        begin -= 1
    end = len(token)
    while end > start and token[end - 1] in "\"'),;.]>":
        end -= 1
    return token[:begin] + mask_url(token[begin:end]) + token[end:]


# ---------------------------------------------------------------- where DEST lands on this machine


def local_targets(dest: str, config: Callable[[], Mapping[str, Mapping[str, str]]],
                  env: Mapping[str, str] = os.environ) -> list[str]:
    """The local paths DEST writes into: a local path, `:local:`, a remote of type local, or any of
    these behind alias/crypt/chunker/hasher/compress/cache (`remote=`) or union/combine (`upstreams=`).
    `config` gives rclone's remotes (`rclone config dump`), called only when DEST names one."""
    return _targets(dest, config, env, 0)


def _targets(dest: str, config, env, depth: int) -> list[str]:
    if depth > MAX_DEPTH:
        return []
    d = parse(dest)
    if d.remote is None:
        return [dest]
    opts: dict[str, str] = {}
    if d.remote.startswith(":"):
        kind = d.remote[1:]
    else:
        opts = {k: str(v) for k, v in (config().get(d.remote) or {}).items()}
        prefix = f"RCLONE_CONFIG_{d.remote.upper()}_"
        opts.update({k[len(prefix):].lower(): v for k, v in env.items() if k.startswith(prefix)})
        kind = opts.get("type", "")
    opts.update({p.key: p.value for p in d.params})
    if kind == "local":
        return [d.path]
    if kind in WRAPPERS and opts.get("remote"):
        return _targets(_join(opts["remote"], d.path), config, env, depth + 1)
    if kind == "union":
        ups = [re.sub(r":(ro|nc|writeback)$", "", u) for u in opts.get("upstreams", "").split()]
        return [t for u in ups for t in _targets(_join(u, d.path), config, env, depth + 1)]
    if kind == "combine":
        first, _, rest = d.path.strip("/").partition("/")
        ups = dict(u.split("=", 1) for u in opts.get("upstreams", "").split() if "=" in u)
        chosen = [ups[first]] if first in ups else list(ups.values()) if not first else []
        return [t for u in chosen for t in _targets(_join(u, rest if first else ""), config, env, depth + 1)]
    return []


def _join(remote: str, path: str) -> str:
    if not path:
        return remote
    return remote + path if remote.endswith((":", "/")) else f"{remote}/{path}"


def resolved(path: str) -> list[Path]:
    """Where a local path lands: as the OS resolves it, and after rclone's lexical clean of `..`."""
    return [Path(path).resolve(), Path(os.path.normpath(os.path.abspath(path))).resolve()]


def lands_inside(target: str, protected: Path) -> bool:
    """True when writing at `target` writes at or under `protected` (both resolved)."""
    p = protected.resolve()
    return any(t == p or p in t.parents for t in resolved(target))
