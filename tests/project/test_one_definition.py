"""One definition per idea: literals that belong to one module appear nowhere else in shard_pipeline/.

Each test reads the package's source as text (no process starts), so it is in the fast tier.
"""
from __future__ import annotations

import re
from pathlib import Path

from shard_pipeline.worker.task import parse, rerun_argv
from shard_pipeline.worker.taskcmd import TASK_MODULE, task_argv

PACKAGE = Path(__file__).resolve().parents[2] / "shard_pipeline"


def sources() -> dict[str, str]:
    """Every Python module of the package by its path relative to shard_pipeline/."""
    return {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def places(pattern: str, allowed: set[str]) -> list[str]:
    """`file:line` of every match of `pattern` outside the `allowed` modules."""
    found = []
    for name, text in sources().items():
        if name in allowed:
            continue
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in re.finditer(pattern, text)]
    return found


# --- the task command line ---------------------------------------------------------------------

def test_the_task_command_line_is_built_in_one_place():
    assert places(rf"[\"']{re.escape(TASK_MODULE)}[\"' ]", {"worker/taskcmd.py"}) == []
    assert places(r'"-m"', {"worker/taskcmd.py"}) == []  # no other module builds a `python -m ...` argv


def test_task_argv_is_what_the_task_entry_parses(tmp_path):
    a = parse(task_argv("write", tmp_path, 3)[3:])
    assert (a.stage, a.rundir, a.task, a.by_hand, a.group) == ("write", tmp_path.resolve(), 3, True, False)
    g = parse(task_argv("partition", tmp_path, 2, group=True)[3:])
    assert (g.task, g.group) == (2, True)
    assert task_argv("plan", tmp_path, None, python="/opt/py") == ["/opt/py", "-m", TASK_MODULE, "plan", str(tmp_path)]
    assert rerun_argv("plan", tmp_path, None)[-5:] == task_argv("plan", tmp_path, None)



# --- stage traits ------------------------------------------------------------------------------

def test_stage_traits_come_from_the_registry():
    """Which stages are arrays of C units, which run as one job, their job-name letters: the registry says."""
    from shard_pipeline.run.registry import STAGES
    from shard_pipeline.run.runconfig import GROUPED_STAGES
    from shard_pipeline.run.unit_table import SINGLE_JOB_STAGES
    from shard_pipeline.submit.executors.slurm import job_names

    # runconfig cannot import the registry (the registry reads configs): its copy is held equal here
    assert GROUPED_STAGES == tuple(s.name for s in STAGES if s.array)
    assert SINGLE_JOB_STAGES == tuple(s.name for s in STAGES if not s.array)
    names = job_names(Path("/r"), "fin_Latn")
    assert [names[s.name][0] for s in STAGES] == [s.letter for s in STAGES] and len(set(names.values())) == len(STAGES)
    # no module keeps its own list of the array stages or of the job letters
    assert places(r"\(\s*\"partition\",\s*\"write\"\s*\)", {"run/runconfig.py"}) == []
    assert places(r"\"(plan|finalize)\":\s*\"[A-Z]\"", set()) == []


# --- run-dir file names ------------------------------------------------------------------------

def test_run_dir_file_names_are_spelled_only_by_rundir():
    """Every module finds a run dir's files through RunDir (run/rundir.py), never by spelling their names."""
    names = r"\"(run\.json|config\.json|languages\.json|DONE|\.run\.lock|plan\.json|buckets\.json|validation\.json|INTERRUPTED\.json)\""
    assert places(names, {"run/rundir.py"}) == []
    assert places(r"/ \"(logs|tasks)\"|\"logs/", {"run/rundir.py"}) == []  # the folders too (path joins)


# --- exit codes --------------------------------------------------------------------------------

def test_exit_codes_are_named_by_errors_exitcode():
    """A process's exit code is an errors.ExitCode member, never a bare number, outside errors.py."""
    counts = {"run/registry.py", "input/zstd_stream.py", "stages/balance.py"}  # their `return 0/1` count things
    assert places(r"(?m)return [0-4]\s*(#.*)?$|sys\.exit\([0-9]+\)|== 130\b", {"errors.py", *counts}) == []


# --- Slurm ---------------------------------------------------------------------------------------

def test_slurm_is_called_and_read_in_one_module():
    """Every Slurm command goes through slurm.call (one failure behaviour: an Answer, never an exception)
    and every SLURM_* variable through slurm.py."""
    commands = r"\b(run|Popen|check_output)\(\s*\[\s*\"(squeue|sacct|sacctmgr|scontrol|sinfo|sbatch|scancel)\""
    assert places(commands, {"slurm.py"}) == []
    assert places(r"[\"']SLURM_[A-Z_]+[\"']", {"slurm.py"}) == []


# --- the layers and the command line -----------------------------------------------------------

def test_every_stage_of_the_registry_has_its_function_in_worker_entries():
    """The registry says what a stage is; worker/entries.py, with plain imports the layer test reads, where its code is."""
    from shard_pipeline.run.registry import STAGE_NAMES
    from shard_pipeline.worker.entries import stage_main

    assert [stage_main(n).__module__ for n in STAGE_NAMES] == [f"shard_pipeline.stages.{n}" for n in STAGE_NAMES]
    assert places(r"import_module|__import__", set()) == []  # no stage (or anything) reached by a name the layer test cannot see


def test_what_a_resume_was_given_is_read_with_public_argparse_only():
    from shard_pipeline.submit.resuming import given_options

    given, flags = given_options(["--resume", "r", "--mem", "4G", "--partition", "small"])
    assert given == {"resume": Path("r"), "mem": "4G", "worker_partition": "small"}  # no defaults: only what was typed
    assert flags["worker_partition"] == "--slurm-partition" and flags["shard_rows"] == "--shard-rows"
    assert places(r"\._actions\b", set()) == []


def test_a_recorded_command_line_of_another_version_is_read_in_silence(capsys):
    """run.json's argv may hold options this version does not know: the resume reads nothing from
    it (no content option is then taken as unchanged) and prints no usage the user did not ask for."""
    from shard_pipeline.submit.resuming import check_resume_options, made_with

    assert made_with(["hplt-shard", "eng_Latn", "--old-option", "3"]) == {}
    assert made_with(["hplt-shard", "eng_Latn", "--shard-rows", "x"]) == {}
    assert made_with(["hplt-shard", "eng_Latn", "--shard-rows", "3"]) == {"lang": "eng_Latn", "shard_rows": 3}
    assert check_resume_options(["--resume", "r", "--mem", "4G"], ["hplt-shard", "--old-option"]) == {"mem": "4G"}
    assert capsys.readouterr() == ("", "")


# --- what a run keeps beside OUT -----------------------------------------------------------------

def test_the_paths_beside_an_out_are_spelled_only_by_beside():
    """OUT.tmp, OUT.replaced, the claim, its lock, the publish lock, the work folder beside ROOT and the root
    manifest are named by contract/beside.py alone: every other module asks it where they are."""
    spelled = r"[\"'](\.tmp|\.replaced|\.hplt-shard(-claim|-publish)?(\.lock)?|_LANGUAGES\.json)[\"']"
    assert places(spelled, {"contract/beside.py", "files.py"}) == []  # files.py: an atomic write's own temp file
    assert places(r"with_name\((out|root)\.name \+", {"contract/beside.py"}) == []
