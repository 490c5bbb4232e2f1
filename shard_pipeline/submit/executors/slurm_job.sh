#!/bin/bash
# The one batch script every hplt-shard job runs. Values arrive as positional arguments from
# sbatch's argv (never interpolated into a shell string): PYTHON CHECKOUT STAGE RUNDIR OFFSET [MODULE...]
# CHECKOUT is the source checkout that submitted the job ("-" for an installed package): it goes
# first on PYTHONPATH, so a checkout that is not installed runs its own code. An installed
# package is not put on PYTHONPATH (its site-packages could shadow PYTHON's own packages).
#
# Near the time limit Slurm sends USR1 to this shell (sbatch --signal=B:USR1@300): it requeues
# this task, which restarts later from the stage's last checkpoint; the next stage (afterany)
# keeps waiting for it. The stage runs as a child so that the trap can fire while it works. Nothing is
# printed before it: the log's first line is the task's rerun command (worker/task.py), its second
# the job, node and restart count.
set -uo pipefail
python=$1 checkout=$2 stage=$3 rundir=$4 offset=$5
shift 5
if [ "$#" -gt 0 ]; then
    module load "$@" || exit 1
fi

task_id="${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-}}_${SLURM_ARRAY_TASK_ID:-0}"
requeue() {
    echo "hplt-shard: time limit near; requeueing ${task_id} (it resumes from its last checkpoint)" >&2
    kill -TERM "$child" 2>/dev/null
    wait "$child"
    # A failed requeue (a job not requeueable, slurmctld not answering) must not exit 0 unfinished:
    # wait for the limit, so the task ends TIMEOUT and --status names --time.
    if scontrol requeue "$task_id"; then
        exit 0
    fi
    echo "hplt-shard: the requeue of ${task_id} failed (above); it ends at its time limit (TIMEOUT)" >&2
    while :; do sleep 60; done
}
trap requeue USR1

if [ "$checkout" != "-" ]; then
    export PYTHONPATH="${checkout}${PYTHONPATH:+:$PYTHONPATH}"
fi
"$python" -m shard_pipeline.worker.task "$stage" "$rundir" --task-offset "$offset" &
child=$!
wait "$child"
status=$?
# wait returns early (>128) when the trap fires; the trap then exits for us
exit "$status"
