#!/bin/bash
# Whole runs in interleaved pairs: head (this checkout, or HEAD_ENV set), then base, N times.
#
# usage: bench/pairs.sh BASE_COPY CORPUS_DIR SHARD_ROWS PAIRS [HEAD_ENV]
#   BASE_COPY: a checkout with its own ./hplt-shard and built modules (e.g. `rsync -a` of the tree at
#     the base commit, its .venv included); give this checkout itself to compare environments only
#   HEAD_ENV: VAR=VALUE set for head's runs only (e.g. NUMPY_MADVISE_HUGEPAGE=0)
#   PAIRS_SLEEP=S in the environment: sleep S seconds before each run, so that on a VM that reports
#     free pages to its host each run starts with memory handed back, as a run after another program's
#     does in bench/run.py (RESULTS.md section 5; bench/cold_pages.py)
# Prints each run's wall seconds and, per side, the sorted list and the median (RESULTS.md table 4's
# "pairs"). Each run is the whole `./hplt-shard ... --executor local --jobs 2`; its output is checked
# with `--verify` (a failed run or check is printed, and its figure not counted).
set -euo pipefail
base=$(realpath "$1"); corpus=$(realpath "$2"); rows=$3; pairs=$4; head_env=${5:-HPLT_SHARD_PAIRS=head}
head=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/pairs.XXXXXX)
declare -A times
one() {  # side checkout env
  rm -rf "$work/out" "$work/run" "$work/out.hplt-shard-claim"
  sleep "${PAIRS_SLEEP:-0}"
  local s e
  s=$(date +%s.%N)
  if env "$3" "$2/hplt-shard" eng_Latn --corpus v4 --local-root "$corpus" --out "$work/out" --run-dir "$work/run" \
      --executor local --license CC0-1.0 --shard-rows "$rows" --jobs 2 --counts-index "$work/counts" >/dev/null 2>&1; then
    e=$(date +%s.%N)
    local took
    took=$(python3 -c "print(round($e - $s, 3))")
    if "$head/hplt-shard" --verify "$work/out" >/dev/null 2>&1; then
      times[$1]="${times[$1]:-} $took"
      echo "$1 $took"
    else
      echo "$1 output failed --verify"
    fi
  else
    echo "$1 run failed"
  fi
}
for _ in $(seq 1 "$pairs"); do
  one head "$head" "$head_env"
  one base "$base" HPLT_SHARD_PAIRS=base
done
for side in head base; do
  python3 -c "import statistics, sys; v = sorted(map(float, sys.argv[2:])); print(sys.argv[1], v, 'median', statistics.median(v))" \
    "$side" ${times[$side]:-}
done
rm -rf "$work"
