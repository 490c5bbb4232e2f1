"""datatrove 0.10 at its best for this job: JsonlReader -> ParquetWriter, LocalPipelineExecutor(tasks = workers = N).

    python bench/dt_run.py SRC_DIR OUT_DIR LOG_DIR N [--wide]

The reader's adapter returns only what the output keeps: id, text and metadata {u, lang}
(the first OpenLID-v3 language), and the writer expands the metadata into top-level columns
(`ParquetWriter(compression="zstd", expand_metadata=True)`), and the reader does not add its
`file_path` column (`add_file_path=False`): the columns are exactly text, id, u, lang.
This measured 10-20% faster than the setup bench/ used before (`--wide`: metadata kept as a
struct column, plus a PII count), so it is the peer at its best (issue #14). datatrove's
default adapter is not usable here: it puts every HPLT field into `metadata`, the Parquet
schema is inferred from the first batch, and a later batch whose `web-register` keys differ
fails the task (ValueError: Table schema does not match ...).

Prints DT_WALL (the executor's wall time) and DT_STEPS, a JSON object of datatrove's own
per-step time totals (seconds summed over tasks) read from LOG_DIR/stats.json.
"""
import json
import sys
import time
from pathlib import Path


def narrow(self, data: dict, path: str, id_in_file):
    lid = data.get("openlid_v3") or {}
    langs = lid.get("lang") or ["und"]
    return {"text": data["text"], "id": data["id"], "media": [], "metadata": {"u": data["u"], "lang": langs[0]}}


def wide(self, data: dict, path: str, id_in_file):
    lid = data.get("openlid_v3") or {}
    langs = lid.get("lang") or ["und"]
    pii = data.get("pii") or []
    return {"text": data["text"], "id": data["id"], "media": [],
            "metadata": {"url": data["u"], "lang": langs[0], "pii_redactions": len(pii)}}


def step_times(logs: Path) -> dict[str, float]:
    """{step name: total seconds over all tasks}, from datatrove's merged stats."""
    try:
        stats = json.loads((logs / "stats.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for step in stats:
        t = step.get("time_stats") or {}
        out[step.get("name", "?")] = float(t.get("total", t.get("global_mean", 0.0)) or 0.0)
    return out


if __name__ == "__main__":
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import ParquetWriter

    src, out, logs, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    is_wide = "--wide" in sys.argv
    ex = LocalPipelineExecutor(
        pipeline=[JsonlReader(src, glob_pattern="*.jsonl.zst", compression="zstd", adapter=wide if is_wide else narrow,
                    add_file_path=is_wide),
                  ParquetWriter(out, compression="zstd", expand_metadata=not is_wide)],
        tasks=cores, workers=cores, logging_dir=logs, skip_completed=False)
    t0 = time.perf_counter()
    ex.run()
    print("DT_WALL", time.perf_counter() - t0, flush=True)
    print("DT_STEPS", json.dumps(step_times(Path(logs))), flush=True)
