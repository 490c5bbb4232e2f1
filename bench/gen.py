"""Parallel, cached generation of HPLT v4-shaped corpora for the benchmark.

Same records as ``python -m shard_pipeline.input.synth`` (it calls the generator's own ``_record``
and ``write_jsonl_zst``), but shards are generated in a process pool, and one big shard can be
generated as several parts (each its own zstd frame, concatenated: a valid multi-frame zstd
stream, as HPLT v4 pool files are). A corpus is keyed by its parameters and reused when its
``.complete`` marker exists.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from shard_pipeline.input import synth  # noqa: E402

LANG = "eng_Latn"


def _one(job: tuple) -> str:
    path, name, part, first, count, seed, text_bytes = job
    m = synth._SHARD_RE.match(name)
    wds_bin = int(m.group(1)) if m else None
    src = m.group(3) if m else None
    rng = random.Random(f"{seed}:{name}" + (f"#{part}" if part is not None else ""))
    lines = (
        orjson.dumps(synth._record(first + k, rng, corpus="v4", lang=LANG, text_bytes=text_bytes,
                                   id_style="hex", wds_bin=wds_bin, src=src))
        for k in range(count)
    )
    synth.write_jsonl_zst(Path(path), lines)
    return path


def corpus_key(n_docs: int, names: list[str], text_bytes: int, seed: int, parts: int) -> str:
    return f"v4-n{n_docs}-t{text_bytes}-s{len(names)}-seed{seed}-p{parts}-{_names_tag(names)}"


def _names_tag(names: list[str]) -> str:
    import hashlib
    return hashlib.sha256(",".join(names).encode()).hexdigest()[:8]


def ensure_corpus(workdir: Path, n_docs: int, names: list[str], text_bytes: int, seed: int = 0,
                  parts: int = 1, jobs: int = os.cpu_count() or 1) -> Path:
    """Return ROOT (holding eng_Latn/<name>.jsonl.zst), generating it unless already complete."""
    root = workdir / "corpus" / corpus_key(n_docs, names, text_bytes, seed, parts)
    done = root / ".complete"
    if done.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    (root / LANG).mkdir(parents=True)
    counts = synth._split_counts(n_docs, len(names))
    jobs_list, first = [], 0
    for name, count in zip(names, counts):
        final = root / LANG / f"{name}.jsonl.zst"
        if parts == 1:
            jobs_list.append((str(final), name, None, first, count, seed, text_bytes))
        else:
            sub = synth._split_counts(count, parts)
            f0 = first
            for k, c in enumerate(sub):
                jobs_list.append((str(root / f".{name}.part{k}.zst"), name, k, f0, c, seed, text_bytes))
                f0 += c
        first += count
    with Pool(jobs) as pool:
        pool.map(_one, jobs_list, chunksize=1)
    if parts > 1:
        for name in names:
            final = root / LANG / f"{name}.jsonl.zst"
            with open(final, "wb") as out:
                for k in range(parts):
                    p = root / f".{name}.part{k}.zst"
                    with open(p, "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 22)
                    p.unlink()
    (root / "params.json").write_text(json.dumps(
        {"n_docs": n_docs, "names": names, "text_bytes": text_bytes, "seed": seed, "parts": parts}) + "\n")
    done.write_text("ok\n")
    return root


def ensure_concat(workdir: Path, src_root: Path, names: list[str], out_name: str = "10_1") -> Path:
    """One big multi-frame shard: the given shards of an existing corpus, concatenated byte for byte.

    Concatenated zstd files are one valid multi-frame stream (as HPLT v4 pool files are), and the
    shards' ids are distinct, so this makes a multi-GB single shard in seconds.
    """
    root = workdir / "corpus" / f"concat-{src_root.name}-{_names_tag(names)}"
    if (root / ".complete").exists():
        return root
    (root / LANG).mkdir(parents=True, exist_ok=True)
    with open(root / LANG / f"{out_name}.jsonl.zst", "wb") as out:
        for n in names:
            with open(src_root / LANG / f"{n}.jsonl.zst", "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
    (root / "params.json").write_text(json.dumps({"concat_of": str(src_root), "names": names}) + "\n")
    (root / ".complete").write_text("ok\n")
    return root


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="generate (or reuse) a cached benchmark corpus; prints ROOT")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "work")
    ap.add_argument("--docs", type=int, default=0)
    ap.add_argument("--names", required=True, help="comma-separated shard names")
    ap.add_argument("--text-bytes", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", type=int, default=1, help="generate each shard as N concatenated frames in parallel")
    ap.add_argument("--concat-of", type=Path, help="instead: concatenate --names of this corpus root into one shard 10_1")
    a = ap.parse_args()
    if a.concat_of:
        print(ensure_concat(a.workdir.resolve(), a.concat_of.resolve(), a.names.split(",")))
        sys.exit(0)
    print(ensure_corpus(a.workdir.resolve(), a.docs, a.names.split(","), a.text_bytes, a.seed, a.parts))
