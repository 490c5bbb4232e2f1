"""HPLT-shaped fixture generator: shards like the v3 and v4 release files (``docs/hplt-mapping.md``; same
fields, names, multi-frame zstd) for the tests, the bundled example and the benchmarks; a pure function of the seed.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path

import orjson
import zstandard

from shard_pipeline.errors import ExitCode
from shard_pipeline.files import atomic_file

ID_STYLES = ("hex", "web", "sorted", "prefix")
CORPORA = ("v3", "v4")

# Words mix ASCII with Latin-1 (é, ß), CJK (中) and astral-plane emoji so that
# UTF-8 bytes, code points and UTF-16 units all differ. A few thousand
# syllable words drawn with Zipf-like weights compress about as well as real
# web text (3-5x), so benchmarks see realistic zstd and JSON costs.
_SPECIAL_WORDS = ("café", "Straße", "naïve", "Zürich", "€1,200", "中文", "这是", "测试", "😀", "🎉", "☀️", "señor")


def _word_table(size: int = 6000, slots: int = 1 << 16, seed: int = 20260101) -> tuple[str, ...]:
    """65,536 word slots filled with Zipf-like frequencies, the same on every machine: a document is one
    ``randbytes`` call and a C-level lookup, so 100 MB of fixtures take seconds."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ou", "ai")]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
    ranked = sorted(words)
    rng.shuffle(ranked)
    # Non-ASCII words get frequent ranks so nearly every document has some.
    ranked[7:7] = _SPECIAL_WORDS
    weights = [1.0 / rank for rank in range(1, len(ranked) + 1)]
    total = sum(weights)
    table: list[str] = []
    for word, w in zip(ranked, weights, strict=True):
        table.extend([word] * max(1, round(w / total * slots)))
    return tuple(table[:slots]) if len(table) >= slots else tuple(table + ranked[: slots - len(table)])


_WORDS = _word_table()
_REGISTERS = ("MT", "LY", "SP", "ID", "NA", "HI", "IN", "OP", "IP")
_DOMAINS = ("example.org", "example.com", "news.example.net", "blog.example.fi")
_SHARD_RE = re.compile(r"^(\d+)_(\d+)(?:\.([a-z]+))?$")


def _text(rng: random.Random, text_bytes: int) -> str:
    """Paragraphs joined by "\\n", about ``text_bytes`` UTF-8 bytes long."""
    n_words = max(2, text_bytes // 7)
    idx = array("H")
    idx.frombytes(rng.randbytes(2 * n_words))
    if sys.byteorder == "big":
        idx.byteswap()
    words = itemgetter(*idx)(_WORDS)
    paragraphs = []
    start = 0
    while start < n_words:
        end = start + rng.randint(20, 120)
        para = " ".join(words[start:end])
        paragraphs.append(para[:1].upper() + para[1:] + ".")
        start = end
    return "\n".join(paragraphs)


def _doc_id(i: int, rng: random.Random, id_style: str) -> str:
    """Ids in the shapes the sort must cope with (see scale-notes.md)."""
    if id_style == "hex":
        return f"{rng.getrandbits(128):032x}"
    if id_style == "web":
        return f"web:{i}"
    if id_style == "sorted":
        return f"doc-{i:010d}"
    if id_style == "prefix":
        return "https://www.example.org/archive/collections/2024/crawl/documents/" + f"{i:x}"
    raise ValueError(f"unknown id_style {id_style!r}; expected one of {', '.join(ID_STYLES)}")


def _crawl_id(rng: random.Random, src: str | None) -> str:
    """crawl_id consistent with the v4 English source tag (cc / ia / ab)."""
    if src == "ab":
        return "archivebot"
    if src == "ia":
        return f"wide{rng.randint(1, 20):05d}"
    return f"CC-MAIN-{rng.randint(2014, 2025)}-{rng.randint(5, 50):02d}"


def _timestamp(rng: random.Random) -> str:
    """A WARC timestamp, ISO 8601 UTC as HPLT stores ``ts``."""
    year, month, day = rng.randint(14, 25), rng.randint(1, 12), rng.randint(1, 28)
    hour, minute, second = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    return f"20{year:02d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def _lid(lang: str, rng: random.Random) -> dict:
    p = round(rng.uniform(0.55, 0.99), 4)
    return {"lang": [lang, "fra_Latn", "deu_Latn"], "prob": [p, round((1 - p) / 2, 4), round((1 - p) / 4, 4)]}


def _with_pii(text: str, rng: random.Random) -> tuple[str, list[list[int]]]:
    """Sometimes append an e-mail address; the text and its PII spans ([start, end) code points, as HPLT's)."""
    if rng.random() >= 0.2:
        return text, []
    email = f"{rng.choice(('anna', 'jussi', 'li'))}@example.org"
    start = len(text) + len("\nContact: ")
    return f"{text}\nContact: {email} for details.", [[start, start + len(email)]]


@dataclass(frozen=True)
class _Drawn:
    """What both releases' records share; drawn in one fixed order, so a seed fixes every byte."""

    i: int
    lang: str
    id_style: str
    text: str
    pii: list[list[int]]
    wds_bin: int
    registers: dict[str, float]


def _record(
    i: int,
    rng: random.Random,
    *,
    corpus: str,
    lang: str,
    text_bytes: int,
    id_style: str,
    wds_bin: int | None = None,
    src: str | None = None,
) -> dict:
    if corpus not in CORPORA:
        raise ValueError(f"unknown corpus {corpus!r}; expected v3 or v4")
    text, pii = _with_pii(_text(rng, text_bytes), rng)
    rec, bin_ = _crawl_fields(i, rng, wds_bin, src)
    registers = {r: round(rng.random(), 3) for r in rng.sample(_REGISTERS, 3)}
    drawn = _Drawn(i, lang, id_style, text, pii, bin_, registers)
    return _v3_fields(rec, drawn, rng) if corpus == "v3" else _v4_fields(rec, drawn, rng, src)


def _crawl_fields(i: int, rng: random.Random, wds_bin: int | None, src: str | None) -> tuple[dict, int]:
    """The WARC and crawl fields of a record, and its WDS bin (drawn when not given)."""
    domain = rng.choice(_DOMAINS)
    crawl = _crawl_id(rng, src)
    u = f"https://{domain}/{rng.randint(1, 10**6)}/page-{i}.html"
    ts = _timestamp(rng)
    f = f"./segments/{rng.randint(10**12, 10**13)}.0/warc/{crawl}-{rng.randint(0, 99999):05d}.warc.gz"
    bin_ = wds_bin if wds_bin is not None else rng.randint(5, 10)
    rec = {"f": f, "o": rng.randint(0, 10**9), "s": rng.randint(1000, 100000), "rs": rng.randint(1000, 500000),
           "u": u, "c": "text/html", "ts": ts, "de": "utf-8", "crawl_id": crawl}
    return rec, bin_


def _v3_fields(rec: dict, d: _Drawn, rng: random.Random) -> dict:
    """v3: 0-10 WDS scale, 10 values; top-level lang/prob lists."""
    wds = 10.0 if d.wds_bin >= 10 else round(d.wds_bin + rng.uniform(0, 0.9), 1)
    lid = _lid(d.lang, rng)
    rec.update(lang=lid["lang"], prob=lid["prob"], text=d.text, cluster_size=rng.randint(1, 20),
               seg_langs=[d.lang] * (d.text.count("\n") + 1), id=_doc_id(d.i, rng, d.id_style), filter="keep",
               pii=d.pii, doc_scores=[wds] + [round(rng.uniform(0, 10), 1) for _ in range(9)])
    rec["web-register"] = d.registers
    if rng.random() < 0.3:
        rec["html_lang"] = ["en"]
    return rec


def _v4_fields(rec: dict, d: _Drawn, rng: random.Random, src: str | None) -> dict:
    """v4: 0-1 WDS scale, 11 values; three LID objects, no top-level lang."""
    wds = 1.0 if d.wds_bin >= 10 else round(d.wds_bin / 10 + rng.uniform(0, 0.09), 2)
    rec.update(id=_doc_id(d.i, rng, d.id_style), text=d.text, xml=f"<doc><main><p>{d.text[:80]}</p></main></doc>",
               md=d.text[:80], openlid_v2=_lid(d.lang, rng), openlid_v3=_lid(d.lang, rng), glotlid_v3=_lid(d.lang, rng),
               seg_langs_openlid_v3=[d.lang] * (d.text.count("\n") + 1), cluster_size=rng.randint(1, 20),
               filter="keep", pii=d.pii, doc_scores=[wds] + [round(rng.random(), 2) for _ in range(10)])
    rec["web-register"] = d.registers
    if d.lang == "eng_Latn":
        rec["bsc-edu"] = round(rng.uniform(0, 5), 3)
    if src == "ia":
        rec["allowed"] = True
    return rec


def make_record(
    i: int,
    rng: random.Random,
    *,
    corpus: str = "v4",
    lang: str = "eng_Latn",
    text_bytes: int = 3000,
    id_style: str = "hex",
) -> dict:
    """One HPLT-shaped record (document number ``i``) drawn from ``rng``."""
    return _record(i, rng, corpus=corpus, lang=lang, text_bytes=text_bytes, id_style=id_style)


def _frames_of(lines: list[bytes], frames: int) -> list[list[bytes]]:
    """Split lines evenly into ``frames`` groups (the first ones get the remainder)."""
    frames = max(1, min(frames, len(lines))) if lines else 1
    q, r = divmod(len(lines), frames)
    out, start = [], 0
    for k in range(frames):
        end = start + q + (1 if k < r else 0)
        out.append(lines[start:end])
        start = end
    return out


def write_jsonl_zst(path: Path, lines: Iterable[bytes], *, frames: int = 1, level: int = 3) -> int:
    """Write lines (each without its newline) as ``.jsonl.zst`` atomically; return the compressed size.
    ``frames > 1`` cuts them evenly into independent zstd frames, as t2sz writes the v4 pool files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cctx = zstandard.ZstdCompressor(level=level)
    with atomic_file(path) as out:
        if frames <= 1:
            with cctx.stream_writer(out, closefd=False) as w:
                for line in lines:
                    w.write(line)
                    w.write(b"\n")
        else:
            for group in _frames_of(list(lines), frames):
                out.write(cctx.compress(b"".join(line + b"\n" for line in group)))
    return path.stat().st_size


def _split_counts(n_docs: int, n_shards: int) -> list[int]:
    q, r = divmod(n_docs, n_shards)
    return [q + (1 if k < r else 0) for k in range(n_shards)]


def generate_corpus(
    root: Path,
    lang: str,
    *,
    corpus: str = "v4",
    n_docs: int,
    shard_names: Sequence[str],
    seed: int = 0,
    text_bytes: int = 3000,
    id_style: str = "hex",
    frames: int = 1,
    annotated: bool = False,
) -> list[Path]:
    """Write ``<root>/<lang>/<name>.jsonl.zst`` for every shard name; return the paths.

    ``n_docs`` is spread evenly (earlier shards get the remainder); each shard's generator is seeded by
    (seed, name) and document numbers are global, so ids are unique across the corpus. Records agree
    with their shard name (WDS bin, v4 source tag). ``annotated`` adds `with_extra_annotations`.
    """
    if not shard_names:
        raise ValueError("generate_corpus needs at least one shard name")
    names = [n[: -len(".jsonl.zst")] if n.endswith(".jsonl.zst") else n for n in shard_names]
    if len(set(names)) != len(names):
        raise ValueError(f"repeated shard names in {list(shard_names)!r}")
    paths = []
    first = 0
    for name, count in zip(names, _split_counts(n_docs, len(names)), strict=True):
        m = _SHARD_RE.match(name)
        wds_bin = int(m.group(1)) if m else None
        src = m.group(3) if m else None
        rng = random.Random(f"{seed}:{name}")
        extra = random.Random(f"{seed}:{name}:annotations") if annotated else None
        lines = (
            orjson.dumps(
                _annotate(extra, corpus, lang, _record(
                    first + k,
                    rng,
                    corpus=corpus,
                    lang=lang,
                    text_bytes=text_bytes,
                    id_style=id_style,
                    wds_bin=wds_bin,
                    src=src,
                ))
            )
            for k in range(count)
        )
        path = Path(root) / lang / f"{name}.jsonl.zst"
        write_jsonl_zst(path, lines, frames=frames)
        paths.append(path)
        first += count
    return paths


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m shard_pipeline.input.synth",
        description="Write an HPLT-shaped synthetic corpus: ROOT/LANG/<shard>.jsonl.zst.",
    )
    p.add_argument("root", type=Path, help="corpus root (the folder that will hold LANG/)")
    p.add_argument("lang", help="language directory, e.g. eng_Latn")
    p.add_argument("--corpus", choices=CORPORA, default="v4", help="record shape (default v4)")
    p.add_argument("--n-docs", type=int, required=True, help="documents in total, spread evenly over the shards")
    p.add_argument(
        "--shards",
        required=True,
        help="comma-separated shard names, e.g. 10_1,9_1,8_30.ia (with or without .jsonl.zst)",
    )
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--text-bytes", type=int, default=3000, help="approximate UTF-8 bytes of text per document")
    p.add_argument("--id-style", choices=ID_STYLES, default="hex", help="id shape (default hex)")
    p.add_argument("--frames", type=int, default=1, help="zstd frames per shard (t2sz style when > 1)")
    p.add_argument("--annotated", action="store_true",
                   help="add the annotations only some records carry (v4 extra quality scores, missing web-register)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    names = [s.strip() for s in args.shards.split(",") if s.strip()]
    if args.n_docs < 0:
        print("--n-docs must be >= 0", file=sys.stderr)
        return ExitCode.USAGE
    paths = generate_corpus(
        args.root,
        args.lang,
        corpus=args.corpus,
        n_docs=args.n_docs,
        shard_names=names,
        seed=args.seed,
        text_bytes=args.text_bytes,
        id_style=args.id_style,
        frames=args.frames,
        annotated=args.annotated,
    )
    for path in paths:
        print(path)
    return ExitCode.OK



def _annotate(rng: random.Random | None, corpus: str, lang: str, rec: dict) -> dict:
    """`rec` with the annotations only some records carry, when `rng` is given: v4's extra quality scores for
    languages other than English (HPLT joins them by id from parallel files), and about one record in ten
    without its `web-register` (languages the register classifier does not cover)."""
    if rng is None:
        return rec
    if rng.random() < 0.1:
        del rec["web-register"]
    if corpus == "v4" and lang != "eng_Latn":
        rec["bsc-edu"] = round(rng.uniform(0, 5), 3)
        rec["finepdfs-edu"] = round(rng.uniform(0, 5), 3)
        rec["fineweb2-hq"] = round(rng.random(), 4)
        rec["jql"] = round(rng.random(), 4)
        rec["propella-4b"] = {"content_quality": round(rng.uniform(0, 5), 2), "content_safety": rng.choice(["safe", "unsafe"]),
                              "educational_value": round(rng.uniform(0, 5), 2), "is_boilerplate": rng.random() < 0.2}
    return rec


if __name__ == "__main__":
    raise SystemExit(main())
