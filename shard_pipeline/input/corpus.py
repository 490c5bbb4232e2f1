"""Finding the input shards of one language.

Local corpora are ``<local_root>/<lang>/*.jsonl.zst``; HPLT v3 can also be listed from
``<base_url>/<lang>.map``. ``--wds`` and ``--sources`` select by release name (hplt-format.md
section 2), as the HPLT sampler does, so a run's scope is known before anything is read.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shard_pipeline.errors import UserError
from shard_pipeline.input.fetch import is_url
from shard_pipeline.input.identity import CorpusNames, names_for
from shard_pipeline.input.langdir import SUFFIX, refusal, scan_folder, warning
from shard_pipeline.units import plural

SOURCES = ("cc", "ia", "ab")  # Common Crawl, Internet Archive, ArchiveBot
CORPORA = ("v3", "v4")
WDS_BINS = range(0, 11)  # floor(10 x WDS) on the 0-1 scale; 10 means exactly 1.0

_NAME_RE = re.compile(r"^(\d+)_(\d+)(?:\.([A-Za-z0-9]+))?$")
_DIGITS_RE = re.compile(r"(\d+)")


class InputError(UserError):
    """The input cannot be found or the selection is empty; the message says what was looked for."""


@dataclass(frozen=True)
class InputShard:
    """One input file: where it is, what it was when listed, and its provenance id."""

    name: str  # file name without ".jsonl.zst", e.g. "8_30.ia", "10_1"
    location: str  # absolute local path, or an http(s) URL
    size: int | None  # local: st_size; URL: None unless known
    mtime: int | None  # local: int(st_mtime); URL: None
    source_id: str  # "hplt-v4/clean/eng_Latn/8_30.ia", "hplt-v3/sorted/fin_Latn/10_1"

    @property
    def file_name(self) -> str:
        """The name as it appears in the directory (and in the counts index)."""
        return self.name + SUFFIX


def parse_wds(spec: str) -> frozenset[int]:
    """WDS bins from ``9-10``, ``8,9,10``, ``10`` or a mix (``5-7,10``)."""
    bins: set[int] = set()
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise ValueError(f"bad --wds spec {spec!r}: expected e.g. 9-10, 8,9,10 or 10")
    for item in items:
        lo_s, dash, hi_s = item.partition("-")
        try:
            lo = int(lo_s.strip())
            hi = int(hi_s.strip()) if dash else lo
        except ValueError:
            raise ValueError(f"bad --wds spec {spec!r}: {item!r} is not a score or a range") from None
        if lo > hi:
            raise ValueError(f"bad --wds spec {spec!r}: range {item!r} runs backwards")
        if lo not in WDS_BINS or hi not in WDS_BINS:
            raise ValueError(f"bad --wds spec {spec!r}: scores run from 0 to 10")
        bins.update(range(lo, hi + 1))
    return frozenset(bins)


def parse_sources(spec: str) -> frozenset[str]:
    """Source tags from ``cc,ia`` (any of cc, ia, ab)."""
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise ValueError(f"bad --sources spec {spec!r}: expected e.g. cc or cc,ia (from {', '.join(SOURCES)})")
    unknown = [item for item in items if item not in SOURCES]
    if unknown:
        raise ValueError(f"bad --sources spec {spec!r}: unknown source {unknown[0]!r} (known: {', '.join(SOURCES)})")
    return frozenset(items)


def _parsed_name(name: str) -> tuple[int, int, str | None] | None:
    """(bin, n, src) for release names, None for anything else."""
    m = _NAME_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3)


def natural_order(name: str) -> tuple:
    """``9_2`` before ``9_10``: digit runs compare as numbers (release names, index rows)."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS_RE.split(name))


def _order_key(name: str) -> tuple:
    """Release names first by (bin, n, src) numerically, then other names naturally, then by name."""
    parsed = _parsed_name(name)
    if parsed is not None:
        bin_, n, src = parsed
        return (0, bin_, n, src or "", (), name)
    return (1, 0, 0, "", natural_order(name), name)


def _describe_filter(wds: str | None, sources: str | None) -> str:
    parts = []
    if wds is not None:
        parts.append(f"--wds {wds}")
    if sources is not None:
        parts.append(f"--sources {sources}")
    return " and ".join(parts) if parts else "no filter"


def _present(names) -> str:
    """`: WDS bins 5-10, sources cc, ia`: what the release names hold, so a selection can be corrected."""
    parsed = [p for n in names if (p := _parsed_name(n)) is not None]
    bins = sorted({b for b, _, _ in parsed})
    srcs = sorted({s for _, _, s in parsed if s})
    if not bins:
        return ""
    return f": WDS bins {','.join(map(str, bins))}" + (f", sources {','.join(srcs)}" if srcs else "")


def _unclassified(name: str, wds: str | None, sources: str | None) -> str | None:
    """Why the filters cannot tell whether `name` is in or out, or None when they can: an unfiltered run
    reads every shard, so a name a filter cannot classify is never dropped in silence."""
    parsed = _parsed_name(name)
    if wds is not None and (parsed is None or parsed[0] not in WDS_BINS):
        return f"--wds {wds} needs names <bin>_<n>[.<src>]{SUFFIX} with a bin from 0 to 10"
    if sources is not None and (parsed is None or parsed[2] not in SOURCES):
        return f"--sources {sources} needs names <bin>_<n>.<src>{SUFFIX} with <src> one of {', '.join(SOURCES)}"
    return None


def _select(names: list[str], wds: str | None, sources: str | None, where: str) -> list[str]:
    """Apply the WDS and source filters to file names (without the suffix), on the parsed ``<bin>_`` prefix
    (``--wds 1`` never selects ``10_*``); names a filter cannot classify are refused, all of them named."""
    bins = parse_wds(wds) if wds is not None else None
    srcs = parse_sources(sources) if sources is not None else None
    odd = {name: why for name in names if (why := _unclassified(name, wds, sources)) is not None}
    if odd:
        shown = sorted(odd, key=_order_key)
        more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
        raise InputError(
            f"{odd[shown[0]]}, but {where} has {plural(len(shown), 'file')} it cannot classify: "
            + ", ".join(n + SUFFIX for n in shown[:5]) + more
            + "; an unfiltered run would read them: rename or move them, or run without the filter"
        )
    chosen = []
    for name in names:
        bin_, _, src = _parsed_name(name) or (None, None, None)
        if bins is not None and bin_ not in bins:
            continue
        if srcs is not None and src not in srcs:
            continue
        chosen.append(name)
    return sorted(chosen, key=_order_key)


def corpus_names(corpus: str, folder: str, corpus_name: str | None) -> CorpusNames:
    """identity.names_for, its refusal an InputError (one message, exit 2)."""
    try:
        return names_for(corpus, folder, corpus_name)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {', '.join(CORPORA)}, not {corpus!r}")


def not_a_shard_file(path: str) -> str | None:
    """Why `path` (links followed) cannot be read as a shard, or None when it is a readable regular file."""
    import stat

    if os.path.islink(path) and not os.path.exists(path):
        return f"dangling symbolic link to {os.readlink(path)}"
    try:
        st = os.stat(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return None


class InputChanged(UserError):
    """An input shard differs from what the run listed (its size or mtime): it is never read as it is now."""


def why_changed(location: str, size: int | None, mtime: int | None) -> str | None:
    """How a local input differs from its listing (size, mtime, gone), or None (URLs: no stat, no check)."""
    if size is None or mtime is None:
        return None
    try:
        st = os.stat(location)
    except OSError as exc:
        return f"cannot stat it ({exc.strerror}); it was listed with size {size}, mtime {mtime}"
    if st.st_size != size or int(st.st_mtime) != mtime:
        return f"size {size} -> {st.st_size}, mtime {mtime} -> {int(st.st_mtime)}"
    return None


def check_unchanged(location: str, size: int | None, mtime: int | None, when: str) -> None:
    """Raise InputChanged when a local input's size or mtime differs from the listing."""
    why = why_changed(location, size, mtime)
    if why:
        raise InputChanged(f"{location} changed since the run listed it ({when}): {why}; the run reads inputs "
                           "exactly as listed in shard_inventory.tsv; restore the file or start a new run")


def _warn(message: str) -> None:
    print(f"hplt-shard: warning: {message}", file=sys.stderr)


def _local_shards(lang: str, corpus: str, root: Path, wds: str | None, sources: str | None,
                  warn: Callable[[str], None] | None = None, corpus_name: str | None = None) -> list[InputShard]:
    """The selected shards of a local language folder; every other entry is refused or warned about (langdir.py)."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise InputError(f"corpus root {root} does not exist (looked for {root}/{lang}/*{SUFFIX})")
    lang_dir = root / lang
    if not lang_dir.is_dir():
        try:
            known = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            known = []
        close = close_languages(lang, known)
        below = [root / k for k in known if (root / k / lang).is_dir()]  # --local-root one level too high
        hint = (f"; did you mean --local-root {' or '.join(str(b) for b in below[:3])}?" if below else
                f"; did you mean {', '.join(close)}?" if close else
                f"; {plural(len(known), 'language')} there" if known else "")
        raise InputError(f"unknown language {lang!r}: no directory {lang_dir}{hint}")
    try:
        scan = scan_folder(str(lang_dir), not_a_shard_file)
    except OSError as exc:
        raise InputError(f"cannot list the language folder {lang_dir}: {exc.strerror or exc}") from None
    broken = scan.broken
    if broken:
        more = f" and {len(broken) - 5} more" if len(broken) > 5 else ""
        raise InputError(f"{len(broken)} entries in {lang_dir} are named like shards but are not readable files: "
                         + "; ".join(sorted(broken)[:5]) + more + " (fix or move them; nothing was started)")
    if scan.refused:
        raise InputError(refusal(str(lang_dir), scan.refused))
    if scan.strays:
        (warn or _warn)(warning(str(lang_dir), scan.strays))
    entries = scan.shards
    if not entries:
        raise InputError(f"no shards in {lang_dir} (looked for {lang_dir}/*{SUFFIX})")
    where = str(lang_dir)
    chosen = _select(list(entries), wds, sources, where)
    if not chosen:
        raise InputError(
            f"no shards in {lang_dir} match {_describe_filter(wds, sources)} ({plural(len(entries), f'{SUFFIX} file')} "
            f"there{_present(entries)})"
        )
    names = corpus_names(corpus, root.name, corpus_name)
    shards = []
    for name in chosen:
        st = entries[name].stat()
        shards.append(
            InputShard(
                name=name,
                location=str(lang_dir / (name + SUFFIX)),
                size=st.st_size,
                mtime=int(st.st_mtime),
                source_id=names.source_id(lang, name),
            )
        )
    return shards


def _fetch_map(url: str, retries: int = 3, backoff: float = 1.0) -> str:
    """The text of a ``.map`` file; a 404 means the language is unknown there."""
    for attempt in range(retries + 1):
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "hplt-shard"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            if e.code in (404, 410):
                raise InputError(f"unknown language: {url} not found (HTTP {e.code})") from None
            if e.code < 500 and e.code not in (408, 429):
                raise InputError(f"cannot read shard map {url}: HTTP {e.code} {e.reason}") from None
            error = f"HTTP {e.code} {e.reason}"
        except (OSError, UnicodeDecodeError) as e:
            error = f"{type(e).__name__}: {e}"
        if attempt < retries:
            time.sleep(backoff * 2**attempt)
    raise InputError(f"cannot read shard map {url} after {retries} retries: {error}")


def _url_shards(lang: str, corpus: str, base_url: str, wds: str | None, sources: str | None,
                corpus_name: str | None = None) -> list[InputShard]:
    base = base_url.rstrip("/")
    map_url = f"{base}/{lang}.map"
    by_name: dict[str, str] = {}
    for k, raw in enumerate(_fetch_map(map_url).splitlines(), start=1):
        url = raw.strip()
        if not url or url.startswith("#"):
            continue
        path = urllib.parse.urlparse(url).path
        file_name = path.rsplit("/", 1)[-1]
        if not is_url(url) or not file_name.endswith(SUFFIX):
            raise InputError(f"{map_url}: line {k}: not a shard URL ending in {SUFFIX}: {url[:200]!r}")
        name = file_name[: -len(SUFFIX)]
        if name in by_name and by_name[name] != url:
            raise InputError(f"{map_url}: line {k}: shard {file_name} listed twice")
        by_name[name] = url
    if not by_name:
        raise InputError(f"shard map {map_url} lists no shards")
    chosen = _select(list(by_name), wds, sources, map_url)
    if not chosen:
        raise InputError(
            f"no shards in {map_url} match {_describe_filter(wds, sources)} ({plural(len(by_name), 'shard')} listed"
            f"{_present(by_name)})"
        )
    subset = urllib.parse.urlparse(base).path.rstrip("/").rsplit("/", 1)[-1] or "http"
    names = corpus_names(corpus, subset, corpus_name) if corpus_name else CorpusNames(corpus, subset, True)  # the HPLT map
    # a URL has no stat: size and mtime stay unknown
    return [InputShard(name, by_name[name], None, None, names.source_id(lang, name)) for name in chosen]


def close_languages(lang: str, known: list[str]) -> list[str]:
    """Language folders `lang` was probably meant to be: the same name in other case, the same code in
    another script (zho_Hans, zho_Hant), or a code one letter off (deu -> dey). Whole names are not
    compared: the shared `_Latn` would make deu_Latn look like eng_Latn."""
    by_lower = {k.lower(): k for k in known}
    if lang.lower() in by_lower:
        return [by_lower[lang.lower()]]
    code = lang.partition("_")[0].lower()
    same_code = [k for k in known if k.partition("_")[0].lower() == code]
    if same_code:
        return same_code[:3]
    codes = {k.partition("_")[0].lower(): k for k in known}
    return [codes[c] for c in difflib.get_close_matches(code, list(codes), n=3, cutoff=0.66)]


def find_shards(
    lang: str,
    *,
    corpus: str,
    local_root: Path | None,
    base_url: str | None = None,
    wds: str | None = None,
    sources: str | None = None,
    warn: Callable[[str], None] | None = None,
    corpus_name: str | None = None,
) -> list[InputShard]:
    """The selected shards of ``lang`` (a local root wins over ``base_url``), in a fixed order whatever the
    listing: release names by (bin, n, src) numerically, other names naturally after them. A bad spec is a
    ValueError; a missing root, an unknown language, an empty selection or entries that look like data but
    would not be read are an :class:`InputError`; other unexpected entries go to `warn`."""
    _check_corpus(corpus)
    if not lang or "/" in lang or lang.startswith("."):
        raise InputError(f"bad language code {lang!r}")
    if wds is not None:
        parse_wds(wds)
    if sources is not None:
        parse_sources(sources)
    if local_root is not None:
        return _local_shards(lang, corpus, Path(local_root), wds, sources, warn, corpus_name)
    if base_url:
        return _url_shards(lang, corpus, base_url, wds, sources, corpus_name)
    raise InputError(f"no input for {lang}: give a local root (--local-root, V3_ROOT/V4_ROOT) or a v3 base URL")
