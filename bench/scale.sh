#!/bin/bash
# The memory-bound and scale runs of bench/RESULTS.md, one after the other (they share 2 cores).
#   bash bench/scale.sh            # needs the 2M-doc scale corpus: generated on first use (~10 min)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
W=bench/work
NS="10_1,10_2,9_1,9_2,8_1,8_2,8_3,8_4,7_1,7_2,7_3,7_4,7_5,7_6,7_7,7_8"   # 16 x 125k docs; --wds picks 2/4/8/16
SCALE=$($PY bench/gen.py --workdir $W --docs 2000000 --names $NS --text-bytes 1000)
BIG=$($PY bench/gen.py --workdir $W --concat-of "$SCALE" --names 7_1,7_2,7_3,7_4,7_5,7_6,7_7,7_8,8_1,8_2,8_3,8_4)
step="${1:-all}"
if [[ $step == all || $step == big ]]; then   # (a) one 3.2 GB-JSON shard, --mem 1G: partition RSS; (b) writer; (c) plan
  $PY bench/run.py --corpus-root "$BIG" --only hplt --repeat 1 --mem 1G --tag big-mem1G
fi
if [[ $step == all || $step == local ]]; then
  for w in 10 9-10 8-10 ""; do
    $PY bench/run.py --corpus-root "$SCALE" --only hplt --repeat 1 ${w:+--wds $w} --tag "scale-local-${w:-all}"
  done
fi
if [[ $step == all || $step == slurm ]]; then
  $PY bench/run.py --corpus-root "$SCALE" --only hplt --repeat 1 --executor slurm --conf bench/slurm-local.conf \
    --tag scale-slurm-all
fi
