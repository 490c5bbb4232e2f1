#!/bin/bash
# Base and head at the same time, one core each: their CPU is compared under the same machine phase.
#
# usage: bench/ab_same_time.sh BASE_COPY CORPUS_DIR SHARD_ROWS REPEATS REFERENCE_MANIFEST
#   BASE_COPY: `git archive BASE | tar -x -C COPY` with the venv linked in (ln -s $PWD/.venv COPY/.venv)
#   CORPUS_DIR: bench/work/corpus/<key> (its eng_Latn/ holds the shards)
#
# This VM's speed swings by up to 1.6x within minutes, so runs one after the other (A B A B) need
# many repeats to show a 5-10% change; two runs side by side, each `--jobs 1` on its own core, see
# the same swings. Prints per tree: wall, user+sys CPU, max RSS of its largest process (GNU time),
# and whether every shard's sha256 equals the reference manifest's.
set -euo pipefail
base=$(realpath "$1"); corpus=$(realpath "$2"); rows=$3; repeats=$4; ref=$(realpath "$5")
head=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/ab-same-time.XXXXXX)
one() {  # name checkout
  local out=$work/$1-out run=$work/$1-run
  rm -rf "$out" "$run" "$out.hplt-shard-claim"
  (cd "$2" && PYTHONPATH="$2" /usr/bin/time -f "$1 wall %e s, cpu %U+%S s, max rss %M KiB" \
      "$head/.venv/bin/python" -m shard_pipeline.submit.cli eng_Latn --corpus v4 --local-root "$corpus" \
      --out "$out" --run-dir "$run" --executor local --license CC0-1.0 --shard-rows "$rows" --jobs 1 \
      --counts-index "$work/$1-counts" 2>&1 >/dev/null | tail -1)
  "$head/.venv/bin/python" - "$out/_MANIFEST.json" "$ref" "$1" <<'PY'
import json, sys
got, want = (json.load(open(p))["shards"] for p in sys.argv[1:3])
print(sys.argv[3], "shards equal to the reference:", [(s["name"], s["sha256"]) for s in got] == [(s["name"], s["sha256"]) for s in want])
PY
}
for i in $(seq 1 "$repeats"); do
  one base "$base" & one head "$head" & wait
done
rm -rf "$work"
