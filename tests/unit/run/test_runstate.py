"""One run-state function and one exit-code enum (#21, #24), the partition limits checked before a
submission, and the next step of every failure kind, each read from the function that builds it."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from dataclasses import replace

from shard_pipeline.errors import ExitCode, UsageError, signal_exit
from shard_pipeline.slurm import refusal_kind
from shard_pipeline.run.runconfig import StageResources
from shard_pipeline.run.runstate import (
    Counts,
    RunPhase,
    TaskState,
    is_stuck,
    refusal_next_step,
    run_phase,
    task_state,
)
from shard_pipeline.run.queue import (
    SlurmUnreachable,
    parse_squeue,
    reason_step,
    slurm_reason,
    split_queued,
    squeue_states,
)
from shard_pipeline.run.render import requeued_line
from shard_pipeline.run.steps import CancelThenResume, Resubmit, Resume, render
from shard_pipeline.submit import slurm_limits
from shard_pipeline.submit.executors.slurm import refusal_step

# Captured on the test cluster (Slurm 22.05): node vm, 2 CPUs, 22900 MiB, partition small.
SCONTROL_SMALL = (
    "PartitionName=small AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=vm PriorityJobFactor=1 PriorityTier=1 "
    "RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 "
    "TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED "
    "TRES=cpu=2,mem=22900M,node=1,billing=2\n")
SINFO_SMALL = "2 22900\n"
# LUMI-C small as scontrol prints it (MaxTime 3 days, MaxMemPerCPU), and its two node kinds.
SCONTROL_LUMI = ("PartitionName=small AllowGroups=ALL MaxNodes=4 MaxTime=3-00:00:00 MinNodes=0 State=UP "
                 "TotalCPUs=40960 TotalNodes=320 DefMemPerCPU=1000 MaxMemPerCPU=2000\n")
SINFO_LUMI = "128 229376\n128+ 483328\n"


# -- task states: every state, from the inputs of both executors ---------------------------------------------

@pytest.mark.parametrize("inputs,state", [
    (dict(done=True, queued="RUNNING", alive=True, has_log=True, interrupted=False), TaskState.DONE),
    (dict(done=False, queued="RUNNING", alive=False, has_log=True, interrupted=False), TaskState.RUNNING),  # Slurm
    (dict(done=False, queued="COMPLETING", alive=False, has_log=True, interrupted=False), TaskState.RUNNING),
    (dict(done=False, queued=None, alive=True, has_log=True, interrupted=False), TaskState.RUNNING),  # local, alive
    (dict(done=False, queued="PENDING", alive=False, has_log=False, interrupted=False), TaskState.PENDING),
    # requeued from a node Slurm lost, whose old process still runs there: Slurm's PENDING wins
    (dict(done=False, queued="PENDING", alive=True, has_log=True, interrupted=False), TaskState.PENDING),
    (dict(done=False, queued=None, alive=False, has_log=True, interrupted=True), TaskState.INTERRUPTED),
    (dict(done=False, queued=None, alive=False, has_log=True, interrupted=False), TaskState.FAILED),
    (dict(done=False, queued=None, alive=False, has_log=False, interrupted=False), TaskState.WAITING),
])
def test_task_state(inputs, state):
    assert task_state(**inputs) is state


def counts(**kw) -> Counts:
    base = dict(total=10, done=0, running=0, pending=0, failed=0, interrupted=0, pending_reasons=())
    return Counts(**{**base, **kw})


@pytest.mark.parametrize("c,done,held,phase,code", [
    (counts(done=10), True, False, RunPhase.DONE, 0),
    (counts(done=3, running=2, failed=1), False, False, RunPhase.RUNNING, 3),  # failures so far, still busy
    (counts(done=3), False, True, RunPhase.RUNNING, 3),  # a live local submitter between two tasks
    (counts(pending=4, pending_reasons=("Priority", "Dependency")), False, False, RunPhase.QUEUED, 3),
    (counts(done=4, pending=1, pending_reasons=("Dependency",)), False, False, RunPhase.RUNNING, 3),  # between tasks
    (counts(done=4, failed=1, pending=1, pending_reasons=("Priority",)), False, False, RunPhase.QUEUED, 3),
    (counts(pending=4, pending_reasons=("ReqNodeNotAvail, UnavailableNodes:nid1",)), False, False, RunPhase.QUEUED, 3),
    (counts(running=1, pending=1, pending_reasons=("PartitionConfig",)), False, False, RunPhase.STUCK, 4),
    (counts(done=5, failed=1), False, False, RunPhase.FAILED, 1),
    (counts(failed=1, pending=2, pending_reasons=("DependencyNeverSatisfied",) * 2), False, False, RunPhase.FAILED, 1),
    (counts(pending=2, pending_reasons=("DependencyNeverSatisfied",) * 2), False, False, RunPhase.STUCK, 4),
    (counts(done=5, interrupted=2), False, False, RunPhase.INTERRUPTED, 1),
    (counts(done=5, interrupted=2), False, True, RunPhase.INTERRUPTED, 1),  # a marker's tasks are not run again by a lock
    (counts(done=5), False, False, RunPhase.INTERRUPTED, 1),  # scancelled before they started: nothing failed
])
def test_run_phase_and_its_exit_code(c, done, held, phase, code):
    got = run_phase(c, done_marker=done, held=held)
    assert got is phase and got.exit_code == code


def test_exit_codes_are_one_enum():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 130]
    assert signal_exit(signal.SIGINT) == ExitCode.INTERRUPTED and signal_exit(signal.SIGTERM) == 143
    assert {p: int(p.exit_code) for p in RunPhase} == {RunPhase.QUEUED: 3, RunPhase.RUNNING: 3, RunPhase.DONE: 0,
                                                       RunPhase.FAILED: 1, RunPhase.INTERRUPTED: 1, RunPhase.STUCK: 4}


@pytest.mark.parametrize("reason,stuck", [
    ("PartitionConfig", True), ("PartitionTimeLimit", True), ("DependencyNeverSatisfied", True),
    ("InvalidAccount", True), ("QOSMaxWallDurationPerJobLimit", True),
    ("ReqNodeNotAvail, UnavailableNodes:vm", False), ("Dependency", False), ("Priority", False),
    ("Resources", False), ("AssocMaxJobsLimit", False), ("PartitionDown", False), ("JobHeldUser", False), ("", False),
    ("AssocGrpBillingMinutes", True), ("QOSGrpCPUMinutesLimit", True), ("AssocGrpCPURunMinutesLimit", False),
])
def test_which_reasons_do_not_clear_by_themselves(reason, stuck):
    assert is_stuck(reason) is stuck


def test_squeue_lines_give_state_and_reason():
    q = parse_squeue("301_0|RUNNING|None\n301_1|PENDING|PartitionConfig\n302_0|PENDING|Dependency\n")
    assert split_queued(q["301_1"]) == ("PENDING", "PartitionConfig") and split_queued(q["301_0"])[0] == "RUNNING"
    assert split_queued(None) == (None, "") and split_queued("RUNNING") == ("RUNNING", "")


# -- the next step of every failure kind (docs/operations.md, "The next step after each failure") -------------

def test_next_step_after_a_stuck_job_names_scancel_and_resume():
    text = render(CancelThenResume(Path("/runs/r1"), ("301", "302"), ("PartitionConfig", "Dependency")))
    assert "PartitionConfig: it asks more cores or memory than any node of the partition has" in text
    assert "\n    scancel 301 302\n    ./hplt-shard --resume /runs/r1 ..." in text
    assert "--cpus-per-task and --mem that fit a node" in text and "Dependency" not in text.split("(")[1]


def test_an_allocation_used_up_names_the_account_as_the_way_on():
    text = render(CancelThenResume(Path("/runs/r1"), ("301",), ("AssocGrpBillingMinutes",)))
    assert "AssocGrpBillingMinutes: the project's allocation (billing units) is used up" in text
    assert "--account of a project with allocation left" in text and "scancel 301" in text


def test_next_step_after_ctrl_c_is_the_exact_resume_command():
    assert render(Resume(Path("/runs/my run"), ("--executor", "local"), "interrupted")) == (
        "interrupted before the end (not a failure): to continue: ./hplt-shard --resume '/runs/my run' --executor local")
    assert render(Resume(Path("/runs/r"), after="interrupted")).endswith("to continue: ./hplt-shard --resume /runs/r")


@pytest.mark.parametrize("reason,units,options", [
    ("OUT_OF_MEMORY", 1, ("--mem", "8G")),
    ("OUT_OF_MEMORY", 4, ("--mem", "4G")),  # one unit's memory, as --mem means at submission
    ("TIMEOUT", 1, ("--time", "02:30:00")),
    ("NODE_FAIL", 1, ()),
    ("PREEMPTED", 1, ()),
])
def test_next_step_after_slurm_ended_a_task(reason, units, options):
    mem = {1: "4G", 4: "8G"}[units]
    assert reason_step(Path("/r"), reason, StageResources(mem, "01:15:00", units), units) == Resume(Path("/r"), options)


def test_after_out_of_memory_the_advice_never_stays_below_what_a_unit_needs():
    """A unit that had less than the floor (a run dir of another version, an edited config) is told twice the
    floor, not twice what could never have run."""
    assert reason_step(Path("/r"), "OUT_OF_MEMORY", StageResources("40M", "01:00:00", 1), 1).options == ("--mem", "512M")
    # the stage's finished tasks measured 3 GB: twice 1G would be killed again
    assert reason_step(Path("/r"), "OUT_OF_MEMORY", StageResources("1G", "01:00:00", 1), 1,
                       peak_mb=3000.0).options == ("--mem", "4501M")


def test_a_resume_step_renders_its_exact_command():
    import shlex

    root = Path("/scratch/run (retry)")
    step = reason_step(root, "OUT_OF_MEMORY", StageResources("4G", "01:00:00", 1), 1)
    assert shlex.split(render(replace(step, after="failed")))[1:] == ["./hplt-shard", "--resume", str(root), "--mem", "8G"]


@pytest.mark.parametrize("line,reason", [
    ("slurmstepd: error: *** JOB 77 ON vm CANCELLED AT 2026-12-04T01:00:00 ***", "CANCELLED"),  # scancel
    ("slurmstepd: error: *** JOB 77 ON vm CANCELLED AT 2026-12-04T01:00:00 DUE TO TIME LIMIT ***", "TIMEOUT"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=77.batch.", "OUT_OF_MEMORY"),
    ("slurmstepd: error: *** JOB 77 ON vm CANCELLED AT 2026-12-04T01:00:00 DUE TO NODE FAILURE ***", "NODE_FAIL"),
])
def test_slurms_own_lines_name_the_reason(tmp_path, line, reason):
    log = tmp_path / "local_0.log"  # not an array log's name: sacct is not asked
    log.write_text(f"python -m shard_pipeline.worker.task write /r --task 0\n{line}\n")
    assert slurm_reason(log) == reason


@pytest.mark.parametrize("words,kind", [
    ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed", "cap"),
    ("sbatch: error: AssocMaxSubmitJobLimit", "cap"),
    ("sbatch: error: Invalid account or account/partition combination specified", "request"),
    ("sbatch did not answer within 120 s", "unanswered"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", "unanswered"),
])
def test_a_refused_submission_has_one_next_step_at_submit_and_in_status(words, kind):
    """One definition of the way on after sbatch refused: what the submit prints ends with what --status says."""
    assert refusal_kind(words) == kind
    step = refusal_next_step("/r", words)
    assert step in refusal_step(words, Path("/r"), 2) and step in render(Resubmit(Path("/r"), {"message": words}))
    assert ("./hplt-shard --resume /r --cpus-per-task C" in step) == (kind == "cap")  # fewer jobs fit the cap
    assert ("--account" in step) == (kind == "request")  # what to change comes first
    if kind == "cap":  # the cap is named as the cluster names it
        assert ("MaxSubmitJobsPerUser" if "QOS" in words else "association's MaxSubmitJobs") in step


def test_a_refusal_says_how_many_of_the_runs_jobs_were_cancelled():
    assert "the 2 arrays already queued for this run were cancelled" in refusal_step("AssocMaxSubmitJobLimit", Path("/r"), 2)
    assert "already queued" not in refusal_step("AssocMaxSubmitJobLimit", Path("/r"), 0)
    said = render(Resubmit(Path("/r"), {"message": "sbatch for partition failed (1): Invalid account", "cancelled": ["7"]}))
    assert said.startswith("not queued: sbatch refused the last submission (sbatch for partition failed (1): Invalid "
                           "account); the 1 job it had queued was cancelled, nothing of it runs. Change what")


# -- partition limits: parsing captured text, and the refusal ----------------------------------------------------

def test_parse_the_test_clusters_partition():
    lim = slurm_limits.limits_of("small", SCONTROL_SMALL, SINFO_SMALL)
    assert lim.state == "UP" and lim.max_time is None and lim.max_mem_per_node_mb is None
    assert lim.max_cpus_per_node is None and lim.nodes == (slurm_limits.Node(2, 22900),)


def test_parse_a_lumi_like_partition():
    lim = slurm_limits.limits_of("small", SCONTROL_LUMI, SINFO_LUMI)
    assert lim.max_time == "3-00:00:00" and lim.max_mem_per_cpu_mb == 2000
    assert lim.nodes == (slurm_limits.Node(128, 229376), slurm_limits.Node(128, 483328))


RES_OK = {"partition": StageResources("4G", "01:00:00", 2), "plan": StageResources("4G", "00:30:00"),
          "write": StageResources("8G", "01:00:00", 2), "finalize": StageResources("4G", "00:30:00")}


def test_a_layout_that_fits_has_no_problem():
    assert slurm_limits.layout_problems(RES_OK, slurm_limits.limits_of("small", SCONTROL_SMALL, SINFO_SMALL)) == []


def test_too_many_cores_names_the_limit_and_the_value_that_fits():
    lim = slurm_limits.limits_of("small", SCONTROL_SMALL, SINFO_SMALL)
    res = {**RES_OK, "partition": StageResources("20G", "01:00:00", 5)}
    assert slurm_limits.layout_problems(res, lim) == [
        "partition asks 5 cores per array task; the largest node of partition small has 2: use --cpus-per-task 2"]


def test_too_much_memory_names_the_limit_and_the_value_that_fits():
    lim = slurm_limits.limits_of("small", SCONTROL_SMALL, SINFO_SMALL)
    problems = slurm_limits.layout_problems({**RES_OK, "write": StageResources("40G", "01:00:00", 2),
                                             "plan": StageResources("30G", "00:30:00")}, lim)
    assert problems == [
        "plan asks 30G of memory per array task; the largest node of partition small allows 22900M: "
        "use --mem 22900M, or a --partition with more memory per node",
        "write asks 40G of memory per array task; the largest node of partition small allows 22900M: use "
        "--mem 11450M (per task; 2 tasks per array task), or fewer --cpus-per-task, or a --partition with more memory per node"]


def test_time_and_memory_per_cpu_limits():
    lim = slurm_limits.limits_of("small", SCONTROL_LUMI, SINFO_LUMI)
    problems = slurm_limits.layout_problems({"partition": StageResources("8G", "4-00:00:00", 2),
                                             "plan": StageResources("4G", "01:00:00")}, lim)
    assert problems == [
        "partition asks 8G of memory per array task; MaxMemPerCPU x 2 cores of partition small allows 4000M: use "
        "--mem 2000M (per task; 2 tasks per array task), or fewer --cpus-per-task, or a --partition with more memory per node",
        "partition asks --time 4-00:00:00; partition small allows at most MaxTime=3-00:00:00: use --time 3-00:00:00",
        "plan asks 4G of memory per array task; MaxMemPerCPU x 1 core of partition small allows 2000M: "
        "use --mem 2000M, or a --partition with more memory per node"]


def fake_run(answers: dict[str, tuple[int, str, str]]):
    def run(argv, **kw):
        rc, out, err = answers[argv[0]]
        if rc < 0:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return subprocess.CompletedProcess(argv, rc, out, err)
    return run


def test_check_layout_refuses_with_every_problem(capsys):
    run = fake_run({"scontrol": (0, SCONTROL_SMALL, ""), "sinfo": (0, SINFO_SMALL, "")})
    with pytest.raises(UsageError) as e:
        slurm_limits.check_layout({**RES_OK, "write": StageResources("20G", "01:00:00", 5)}, "small", run=run)
    assert e.value.exit_code == 2 and "cannot run on partition small" in str(e.value)
    assert "use --cpus-per-task 2" in str(e.value)
    fits = slurm_limits.check_layout(RES_OK, "small", run=run)  # fits: no warning, one line for --dry-run
    assert capsys.readouterr().err == ""
    assert fits == "partition small: every stage fits (largest node 2 CPUs, 22900M; MaxTime UNLIMITED)"


def test_missing_or_failing_slurm_commands_warn_and_do_not_refuse(capsys):
    res = {**RES_OK, "write": StageResources("20G", "01:00:00", 5)}
    slurm_limits.check_layout(res, "small", run=fake_run({"scontrol": (-1, "", ""), "sinfo": (0, SINFO_SMALL, "")}))
    assert "warning: scontrol: not found (is Slurm installed here?): the layout was not checked" in capsys.readouterr().err
    slurm_limits.check_layout(res, "small", run=fake_run({"scontrol": (0, SCONTROL_SMALL, ""),
                                                          "sinfo": (1, "", "sinfo: error: slurm_load_partitions")}))
    assert "warning: sinfo -p failed (sinfo: error: slurm_load_partitions)" in capsys.readouterr().err


def test_a_partition_that_does_not_exist_is_refused():
    with pytest.raises(UsageError, match="partition 'big' does not exist on this cluster"):
        slurm_limits.check_layout(RES_OK, "big", run=fake_run({"scontrol": (1, "", "Partition big not found\n")}))


def test_requeued_tasks_are_named_with_nothing_to_do():
    assert requeued_line("write", [1]).startswith("REQUEUED write 1 task (1): requeued by Slurm after a start")
    many = requeued_line("partition", list(range(12)))
    assert "12 tasks (0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ...)" in many and many.endswith("starts again by itself from its "
                                                                                  "last checkpoint")


def _squeue_answers(returncode, stdout="", stderr="", raises=None):
    def run(argv, **kw):
        if raises is not None:
            raise raises
        return subprocess.CompletedProcess(argv, returncode, stdout, stderr)
    return run


def test_a_controller_that_does_not_answer_is_said_not_read_as_no_jobs():
    """--status (strict) never turns an unanswered squeue into a state (the jobs may be queued), nor a missing
    squeue; ids Slurm has forgotten are no queued jobs; a job's own look (not strict) goes on without."""
    down = _squeue_answers(1, stderr="slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    slow = _squeue_answers(None, raises=subprocess.TimeoutExpired(["squeue"], 60))
    missing = _squeue_answers(None, raises=FileNotFoundError())
    munge = _squeue_answers(1, stderr="slurm_load_jobs error: Protocol authentication error")
    for answer in (down, slow, missing, munge):
        with pytest.raises(SlurmUnreachable, match=r"Slurm did not answer \(.*\): whether this run's jobs"):
            squeue_states(["41"], answer, strict=True)
        assert squeue_states(["41"], answer) == {}
    forgotten = _squeue_answers(1, stderr="slurm_load_jobs error: Invalid job id specified")
    assert squeue_states(["41"], forgotten, strict=True) == {}
    queued = _squeue_answers(0, stdout="41_0|PENDING|JobHeldAdmin\n")
    assert squeue_states(["41"], queued, strict=True) == {"41_0": "PENDING|JobHeldAdmin"}
    assert SlurmUnreachable.exit_code == ExitCode.FAILED


def test_help_gives_every_exit_code_of_status():
    from shard_pipeline.submit.args import status_exit_codes

    assert status_exit_codes() == "0 done; 1 failed or interrupted; 3 queued or running; 4 stuck"
