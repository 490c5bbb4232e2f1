#!/usr/bin/env python3
"""The native read loop (`input/_scan.c`) against the msgspec path it replaces, on lines in memory.

    .venv/bin/python bench/scan_speed.py --shard bench/work/corpus/<key>/eng_Latn/10_1.jsonl.zst
    .venv/bin/python bench/scan_speed.py --generated latin|cyrillic|cjk [--lines 20000]

`--shard` decompresses one shard; `--generated` makes v4 lines whose `xml` is ~2x and `md` ~1x their
3,000-character text, as HPLT v4's whole-page fields are (the bench corpus's are 80 characters).
Times, per repeat: `scan` over all lines into a buffer kept between repeats (as partition keeps
its run buffer), against msgspec's decode plus the `str` -> UTF-8 encode of each text.
"""
from __future__ import annotations

import argparse
import io
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import orjson  # noqa: E402

from shard_pipeline.input.reader import native_scan  # noqa: E402
from shard_pipeline.input.records import fast_decoder  # noqa: E402
from shard_pipeline.input.zstd_stream import open_decompressed  # noqa: E402

WORDS = {
    "latin": ["Straße", "naïve", "café", "中文", "😀", "rutolagi", "pairesai", "cave", "hinu", "the", "data", "and"],
    "cyrillic": ["привет", "данные", "язык", "корпус", "и", "в", "текст", "мир"],
    "cjk": ["数据", "语言", "模型", "训练", "文本", "的", "和"],
}


def generated(script: str, n: int) -> list[bytes]:
    rng = random.Random(1)
    lines = []
    for i in range(n):
        words, k = [], 0
        while k < 3000:
            w = rng.choice(WORDS[script])
            words.append(w)
            k += len(w) + 1
        text = " ".join(words)
        rec = {"f": "x.warc.gz", "o": 1, "s": 2, "rs": 3, "u": f"https://e.org/{i}", "c": "text/html",
               "ts": "2019-07-03T15:20:36Z", "de": "utf-8", "crawl_id": "CC", "id": f"{i:032x}", "text": text,
               "xml": "<doc><p>" + text.replace(" ", "</p><p>") + "</p></doc>", "md": "# " + text,
               "openlid_v3": {"lang": ["eng_Latn"], "prob": [0.9]}, "pii": []}
        lines.append(orjson.dumps(rec) + b"\n")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", type=Path)
    ap.add_argument("--generated", choices=sorted(WORDS))
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if native_scan is None:
        print("shard_pipeline.input._scan is not built: run `.venv/bin/pip install -e .`", file=sys.stderr)
        return 1
    if a.shard:
        with open_decompressed(str(a.shard)) as f:
            lines = io.BytesIO(f.read()).readlines()
    elif a.generated:
        lines = generated(a.generated, a.lines)
    else:
        ap.error("give --shard or --generated")
    size = sum(map(len, lines))
    texts = bytearray(b"\0" * size)  # faulted in once, as a partition unit's kept run buffer is
    decode = fast_decoder(True)
    print(f"{len(lines):,} lines, {size / 1e6:.1f} MB of JSON")
    for _ in range(a.repeat):
        t = time.perf_counter()
        taken, _, refused = native_scan(lines, 1, 0, True, texts, 0, 1 << 62, [], [], [], bytearray())
        scan_s = time.perf_counter() - t
        t = time.perf_counter()
        for line in lines:
            decode(line).text.encode("utf-8")
        msgspec_s = time.perf_counter() - t
        print(f"scan {scan_s:.3f} s ({size / scan_s / 1e6:,.0f} MB/s, {taken:,} lines taken{', stopped at a refused line' if refused else ''})"
              f"   msgspec + encode {msgspec_s:.3f} s   {msgspec_s / scan_s:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
