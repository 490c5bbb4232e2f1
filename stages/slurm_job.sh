#!/bin/bash
# The one batch script every hplt-shard job runs. Values arrive as positional arguments from
# sbatch's argv (never interpolated into a shell string): PYTHON STAGE_SCRIPT RUNDIR OFFSET [MODULE...]
set -euo pipefail
python=$1 stage_script=$2 rundir=$3 offset=$4
shift 4
if [ "$#" -gt 0 ]; then
    module load "$@"
fi
exec "$python" "$stage_script" "$rundir" --task-offset "$offset"
