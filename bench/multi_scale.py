#!/usr/bin/env python3
"""Projection of one multi-language run at HPLT v4 scale, from the job layout's own model.

No data is read: each language is a list of full v4 shards (~16.4 GB) plus one partial shard per
WDS bin, laid out exactly as `./hplt-shard L1,L2,... --dry-run` would (the same share of the
task budget in units, the same layout.lay_out_jobs), and compared with each language as its own run.

    .venv/bin/python bench/multi_scale.py                 # the table in docs/DESIGN.md (lumi: C = 16)
    .venv/bin/python bench/multi_scale.py --cpus 1        # one core per array task (before #20)
    .venv/bin/python bench/multi_scale.py --mem 16G --max-tasks 200

Landing times are submit/projection.py's compute-bound model (the English projection's rates,
idle cores, every array task running at once): the slowest partition, all planning in turn,
then a language's own write and its finalize, which its last write unit runs.

Sizes: eng, deu, spa, fra, ita, por, pol are HPLT v4 clean figures (docs/hplt-mapping.md and
the reference notes); the other European languages are an ASSUMPTION (marked `~`), to be
replaced by the dry-run on the real catalogue: `./hplt-shard --langs-file europe.txt --dry-run`.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shard_pipeline.submit import layout  # noqa: E402
from shard_pipeline.submit.languages import partition_units, share_budget, unit_room  # noqa: E402
from shard_pipeline.submit.projection import hms, landing_seconds  # noqa: E402

FULL = 16_400_000_000
KNOWN_TB = {"eng_Latn": 18.15, "spa_Latn": 2.61, "deu_Latn": 2.52, "fra_Latn": 2.21, "ita_Latn": 0.82,
            "por_Latn": 0.79, "pol_Latn": 0.61}
# ASSUMED (order of magnitude, not measured): ~7.2 TB over 33 more European languages.
ASSUMED_TB = {"rus_Cyrl": 2.5, "nld_Latn": 0.55, "ces_Latn": 0.35, "swe_Latn": 0.3, "ukr_Cyrl": 0.3,
              "ron_Latn": 0.3, "hun_Latn": 0.3, "ell_Grek": 0.3, "dan_Latn": 0.2, "fin_Latn": 0.2,
              "bul_Cyrl": 0.15, "slk_Latn": 0.15, "nob_Latn": 0.15, "cat_Latn": 0.12, "hrv_Latn": 0.1,
              "lit_Latn": 0.08, "srp_Cyrl": 0.08, "slv_Latn": 0.06, "ekk_Latn": 0.05, "lvs_Latn": 0.05,
              "glg_Latn": 0.04, "eus_Latn": 0.03, "bos_Latn": 0.03, "mkd_Cyrl": 0.03, "als_Latn": 0.03,
              "bel_Cyrl": 0.03, "isl_Latn": 0.02, "nno_Latn": 0.01, "cym_Latn": 0.01, "mlt_Latn": 0.01,
              "ltz_Latn": 0.01, "gle_Latn": 0.01, "fao_Latn": 0.002}


def shard_sizes(tb: float) -> list[int]:
    total = int(tb * 1e12)
    full = max(0, total // FULL - 5)  # six WDS bins: each ends with a partial shard
    rest = total - full * FULL
    return [FULL] * full + [rest // 6] * 6


def lay(sizes: list[int], budget: int, mem: str, cpus: int = 1, partition_tasks: int | None = None) -> layout.Layout:
    return layout.lay_out_jobs(sizes, {}, shard_rows=1_000_000, task_budget=budget, worker_mem=mem, cpus=cpus,
                               partition_tasks=partition_tasks)


def minutes(t: str) -> int:
    h, m, _ = (int(x) for x in t.split(":"))
    return h * 60 + m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tasks", type=int, default=200)
    ap.add_argument("--mem", default="4G", help="WORKER_MEM: partition tasks' memory (LUMI preset 4G)")
    ap.add_argument("--without", default="", help="languages to leave out, e.g. eng_Latn (run on its own)")
    ap.add_argument("--cpus", type=int, default=16, help="CPUS_PER_TASK: units per array task (lumi preset 16)")
    a = ap.parse_args()
    langs = {l: tb for l, tb in {**KNOWN_TB, **ASSUMED_TB}.items() if l not in a.without.split(",")}
    sizes = {l: shard_sizes(tb) for l, tb in langs.items()}
    # as scope.prepare_all: units shared by bytes (C per array task, packed across languages)
    shares = share_budget([sum(s) for s in sizes.values()], unit_room(a.max_tasks, a.cpus))
    multi = {l: lay(sizes[l], share + 2, a.mem, 1, partition_units(len(sizes[l]), share))
             for l, share in zip(langs, shares)}
    alone = {l: lay(sizes[l], a.max_tasks, a.mem, a.cpus) for l in langs}
    lands = landing_seconds(multi, a.cpus)
    print(f"{'language':<10}{'TB':>7}{'inputs':>7}{'part':>6}{'write':>6}{'part. time':>11}{'write time':>11}"
          f"{'plan mem':>9}{'writer':>7}{'alone: p+w':>11}  {'part./write time':<18}{'lands at':>10}")
    for l, tb in langs.items():
        m, s = multi[l], alone[l]
        mark = "" if l in KNOWN_TB else "~"
        mr, sr = m.resources, s.resources
        print(f"{mark + l:<10}{tb:>7.2f}{len(sizes[l]):>7}{m.partition_tasks:>6}{m.write_tasks:>6}{mr['partition'].time:>11}"
              f"{mr['write'].time:>11}{mr['plan'].mem:>9}{layout.share_of_mem(mr['write'].mem, mr['write'].cpus):>7}"
              f"{s.partition_tasks + s.write_tasks:>11}  {sr['partition'].time + ' / ' + sr['write'].time:<18}"
              f"{hms(lands[l]):>10}")
    ms = list(multi.values())
    p, w = sum(x.partition_tasks for x in ms), sum(x.write_tasks for x in ms)
    groups = -(-p // a.cpus) + -(-w // a.cpus)  # the chain packs the units of every language, C per array task
    sections = sum(x.sections for x in ms)
    plan_s = sections * 23 / 27e6  # measured: 27 M sections in 23 s (bench/RESULTS.md 6)
    parquet = sum(x.est_json_bytes for x in ms) * layout.PARQUET_PER_JSON
    cpus = layout.finalize_cpus(sum(x.est_json_bytes for x in ms))
    hash_min = parquet / (layout.HASH_BYTES_PER_CPU_S * cpus) / 60
    crit = max(minutes(x.resources["partition"].time) for x in ms) + max(minutes(x.resources["write"].time) for x in ms)
    print(f"\n{len(langs)} languages, {sum(langs.values()):.1f} TB compressed, ~{sum(x.est_docs for x in ms) / 1e9:.1f} B docs, "
          f"~{sum(x.est_shards for x in ms):,} output shards")
    print(f"one run, C = {a.cpus}: {p} partition + {w} write units in {groups} + 2 = {groups + 2} queued array tasks "
          f"(budget {a.max_tasks}), 4 arrays")
    print(f"  partition mem {a.mem} each; plan job {max((x.resources['plan'].mem for x in ms), key=layout.parse_mem)} "
          f"(largest language), {sections / 1e6:.0f} M sections in all: ~{plan_s / 60:.0f} min of planning in turn")
    print(f"  writers {max((layout.share_of_mem(x.resources['write'].mem, x.resources['write'].cpus) for x in ms), key=layout.parse_mem)} "
          f"per unit (largest language's), x C per array task; finalize {cpus} cpus, "
          f"~{parquet / 1e12:.1f} TB Parquet re-hashed in ~{hash_min:.0f} min")
    print(f"  wall (layout limits, 1.5x margin, if every task starts at once): partition {max(minutes(x.resources['partition'].time) for x in ms)} min "
          f"+ write {max(minutes(x.resources['write'].time) for x in ms)} min = ~{crit / 60:.1f} h + plan + finalize")
    order = sorted(lands.values())
    print(f"  landing (compute-bound model): first {hms(order[0])}, median {hms(order[len(order) // 2])}, "
          f"last {hms(order[-1])} ({max(lands, key=lands.get)}); "
          f"{sum(1 for v in order if v <= 1800)} of {len(order)} languages within 30 min")
    sep = sum(x.partition_groups + x.write_groups + 2 for x in alone.values())
    print(f"separate runs: {sep} queued array tasks in {4 * len(langs)} arrays: {math.ceil(sep / a.max_tasks)} waves "
          f"under the budget" + (f"; English alone: {alone['eng_Latn'].resources['partition'].time} + {alone['eng_Latn'].resources['write'].time}"
                                  if "eng_Latn" in alone else ""))
    print(f"task-hours (partition + write, by the same model): one run "
          f"{sum(x.partition_tasks * minutes(x.resources['partition'].time) + x.write_tasks * minutes(x.resources['write'].time) for x in ms) / 60:,.0f} h "
          f"(upper bound: every task billed its limit)")


if __name__ == "__main__":
    main()
