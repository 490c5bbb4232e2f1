#!/bin/bash
# The one batch script every hplt-shard job runs. Values arrive as positional arguments from
# sbatch's argv (never interpolated into a shell string): PYTHON PACKAGE_PARENT STAGE RUNDIR OFFSET [MODULE...]
# PACKAGE_PARENT is the folder holding the shard_pipeline package that submitted the job: it goes
# first on PYTHONPATH, so a checkout that is not installed runs the same code as an installed one.
#
# Near the time limit Slurm sends USR1 to this shell (sbatch --signal=B:USR1@300): it requeues
# this task, which restarts later from the stage's last checkpoint; afterok dependents keep
# waiting for it. The stage runs as a child so that the trap can fire while it works.
set -uo pipefail
python=$1 package_parent=$2 stage=$3 rundir=$4 offset=$5
shift 5
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
PYTHONPATH="${package_parent}${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" -m shard_pipeline.run.task "$stage" "$rundir" --task-offset "$offset" &
child=$!
wait "$child"
status=$?
# wait returns early (>128) when the trap fires; the trap then exits for us
exit "$status"
