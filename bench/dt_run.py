"""datatrove 0.10 baseline: JsonlReader -> ParquetWriter(zstd), LocalPipelineExecutor(tasks = workers = N).

    python bench/dt_run.py SRC_DIR OUT_DIR LOG_DIR N [--default-adapter]

By default the reader keeps the fields hplt-shard keeps (id, text, url, first OpenLID-v3 language,
PII count): with datatrove's default adapter every HPLT field goes into `metadata`, the Parquet
schema is inferred from the first batch, and a later batch whose `web-register` keys or `pii`
element type differ fails the task (ValueError: Table schema does not match ...).
"""
import sys
import time


def hplt_fields(self, data: dict, path: str, id_in_file):
    lid = data.get("openlid_v3") or {}
    langs = lid.get("lang") or ["und"]
    pii = data.get("pii") or []
    return {"text": data["text"], "id": data["id"], "media": [],
            "metadata": {"url": data["u"], "lang": langs[0], "pii_redactions": len(pii)}}


if __name__ == "__main__":
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import ParquetWriter

    src, out, logs, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    adapter = None if "--default-adapter" in sys.argv else hplt_fields
    ex = LocalPipelineExecutor(
        pipeline=[JsonlReader(src, glob_pattern="*.jsonl.zst", compression="zstd", adapter=adapter),
                  ParquetWriter(out, compression="zstd")],
        tasks=cores, workers=cores, logging_dir=logs, skip_completed=False)
    t0 = time.perf_counter()
    ex.run()
    print("DT_WALL", time.perf_counter() - t0, flush=True)
