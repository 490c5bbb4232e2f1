#!/bin/bash
# The one batch script every hplt-shard job runs. Values arrive as positional arguments from
# sbatch's argv (never interpolated into a shell string): PYTHON STAGE_SCRIPT RUNDIR OFFSET [MODULE...]
#
# Near the time limit Slurm sends USR1 to this shell (sbatch --signal=B:USR1@300): it requeues
# this task, which restarts later from the stage's last checkpoint; afterok dependents keep
# waiting for it. The stage runs as a child so that the trap can fire while it works.
set -uo pipefail
python=$1 stage_script=$2 rundir=$3 offset=$4
shift 4
if [ "$#" -gt 0 ]; then
    module load "$@" || exit 1
fi

task_id="${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-}}_${SLURM_ARRAY_TASK_ID:-0}"
requeue() {
    echo "hplt-shard: time limit near; requeueing ${task_id} (it resumes from its last checkpoint)" >&2
    kill -TERM "$child" 2>/dev/null
    wait "$child"
    scontrol requeue "$task_id"
    exit 0
}
trap requeue USR1

echo "# job ${task_id} on $(hostname) (restart ${SLURM_RESTART_COUNT:-0})"
"$python" "$stage_script" "$rundir" --task-offset "$offset" &
child=$!
wait "$child"
status=$?
# wait returns early (>128) when the trap fires; the trap then exits for us
exit "$status"
