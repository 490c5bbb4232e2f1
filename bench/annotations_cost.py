"""What --annotations costs: wall time, spill bytes and the largest task's RSS of whole local runs, without it,
with the quality/register set, and with a heavy field (`xml`, page-sized: ~2x the text, as scan_speed.py makes it).

    .venv/bin/python bench/annotations_cost.py --docs 20000 --text-bytes 2000 --repeat 2 --workdir /tmp/annot-bench

Each run keeps its spill (--keep-spill) so its bytes can be summed; every run's shards must equal the first's.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from shard_pipeline.input import synth  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from run import stages_from_exits  # noqa: E402  (the units' exit records: CPU and peak RSS per stage)

LANG = "eng_Latn"
VARIANTS = {"none": (), "quality,register": ("--annotations", "quality,register"), "xml": ("--annotations", "xml")}


def make_corpus(root: Path, docs: int, text_bytes: int, shards: int) -> Path:
    if (root / ".complete").exists():
        return root
    per = docs // shards
    for s in range(shards):
        rng = random.Random(f"annot:{s}")
        lines = []
        for k in range(per):
            rec = synth._record(s * per + k, rng, corpus="v4", lang=LANG, text_bytes=text_bytes, id_style="hex",
                                wds_bin=9, src="cc")
            rec["xml"] = "<doc><p>" + rec["text"].replace(" ", "</p><p>") + "</p></doc>"
            rec["md"] = "# " + rec["text"]
            lines.append(orjson.dumps(rec))
        synth.write_jsonl_zst(root / LANG / f"9_{s + 1}.cc.jsonl.zst", lines)
    (root / ".complete").write_text("ok\n")
    return root


def one_run(corpus: Path, work: Path, extra: tuple[str, ...], shard_rows: int) -> dict:
    out, run = work / "out", work / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(REPO / "hplt-shard"), LANG, "--corpus", "v4", "--local-root", str(corpus),
                    "--out", str(out), "--run-dir", str(run), "--executor", "local", "--license", "CC0-1.0",
                    "--jobs", "2", "--shard-rows", str(shard_rows), "--keep-spill", *extra],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    stages, _ = stages_from_exits(next(run.glob("**/logs")).parent)
    return {"wall_s": wall, **{f"{s}_{k}": stages[s][k] for s in ("partition", "write") for k in ("cpu_s", "max_task_rss")},
            "spill_bytes": sum(p.stat().st_size for p in run.rglob("*.spill")),
            "annotation_bytes": sum(f["bytes"] for f in manifest["files"] if f["name"].startswith("__annotations/")),
            "shards": [e["sha256"] for e in manifest["shards"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--text-bytes", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/annot-bench"))
    opts = ap.parse_args()
    corpus = make_corpus(opts.workdir / "corpus", opts.docs, opts.text_bytes, opts.shards)
    results, first = {}, None
    for _ in range(opts.repeat):  # interleaved, so the machine's swings touch every variant alike
        for name, extra in VARIANTS.items():
            r = one_run(corpus, opts.workdir / "runs", extra, max(1, opts.docs // 6))
            first = first or r["shards"]
            assert r["shards"] == first, f"{name}: shards differ from the run without annotations"
            results.setdefault(name, []).append(r)
    print(f"{opts.docs} docs x {opts.text_bytes} B text, {opts.shards} input shards, 2 jobs, median of {opts.repeat}")
    print(f"{'variant':<18}{'wall s':>7}{'part cpu s':>11}{'write cpu s':>12}{'spill MiB':>10}{'annot MiB':>10}"
          f"{'part RSS MiB':>13}{'write RSS MiB':>14}")
    for name, rs in results.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"{name:<18}{med('wall_s'):>7.2f}{med('partition_cpu_s'):>11.2f}{med('write_cpu_s'):>12.2f}"
              f"{med('spill_bytes') / 2**20:>10.1f}{med('annotation_bytes') / 2**20:>10.1f}"
              f"{max(r['partition_max_task_rss'] for r in rs) / 2**20:>13.0f}"
              f"{max(r['write_max_task_rss'] for r in rs) / 2**20:>14.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
