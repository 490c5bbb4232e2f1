"""Progress where work is long: the local ticker's line, task logs' progress lines, --status reading them."""
from __future__ import annotations

import io
import time

from shard_pipeline.submit.executors.local import Ticker
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.render import live_line
from shard_pipeline.run.tasklog import count_progress_lines, last_progress_line
from tests.pipeline_util import lang_dir


def test_finished_run_reads_as_complete_in_the_live_lines(finished_run):
    out, run_dir = finished_run
    run = RunDir(lang_dir(run_dir))
    part = live_line(run, "partition", time.time() - 10)
    assert part.startswith("partition 120 docs") and "(100%)" in part and "ETA -" in part
    write = live_line(run, "write", time.time() - 10)
    n = len(list(out.glob("shard-*.parquet")))
    assert write.startswith(f"write     {n} of {n} shards")
    assert live_line(run, "plan", time.time()) is None


def test_task_logs_carry_one_progress_line_per_input_and_per_shard(finished_run):
    out, run_dir = finished_run
    run = RunDir(lang_dir(run_dir))
    part_logs = sorted(run.log_dir("partition").glob("*.log"))
    write_logs = sorted(run.log_dir("write").glob("*.log"))
    assert count_progress_lines(part_logs, "input") == 4  # make_corpus writes four input shards
    assert count_progress_lines(write_logs, "shard") == len(list(out.glob("shard-*.parquet")))
    line = last_progress_line(write_logs[0])
    assert line is not None and " write task " in line and " shard " in line and line[:4].isdigit()


def test_last_progress_line_ignores_other_lines(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("2026-12-02T19:20:01 partition task 3 input 1/2 a.jsonl.zst: 10 docs, 1.0 MB, 1.0 MB/s\n"
                   "2026-12-02T19:20:05 partition task 3 input 2/2 b.jsonl.zst: 20 docs, 2.0 MB, 1.0 MB/s\n"
                   "some other line\n")
    assert last_progress_line(log).endswith("input 2/2 b.jsonl.zst: 20 docs, 2.0 MB, 1.0 MB/s")
    assert last_progress_line(tmp_path / "missing.log") is None


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """What a terminal shows: each line as its last carriage return left it, erase-to-end dropped."""
    return [line.split("\r")[-1].replace("\x1b[K", "") for line in text.split("\n")]


def test_on_a_terminal_task_counts_never_run_into_the_live_line_and_the_last_line_is_final(finished_run):
    """#21: `ETA 0h00m12spartition 1/4 tasks` and a last line stuck at `9 of 10 shards`."""
    out, run_dir = finished_run
    n = len(list(out.glob("shard-*.parquet")))
    term = _Terminal()
    ticker = Ticker(RunDir(lang_dir(run_dir)), "write", stream=term)
    ticker.started -= 10
    ticker._tick()  # a live line is on screen, as after the first second
    ticker.say("write     1/3 tasks")
    ticker.stop()
    shown = [l for l in screen(term.getvalue()) if l]
    assert shown[0] == "write     1/3 tasks" and all(("ETA" in l) != ("tasks" in l) for l in shown), shown
    assert shown[-1].endswith(f"write     {n} of {n} shards, " + shown[-1].split(" shards, ")[1])
    assert f"{n} of {n} shards" in shown[-1] and term.getvalue().endswith("\n")


def test_a_task_measures_its_figures_and_status_sums_them_per_stage(tmp_path):
    """A task measures itself since its process started; its figures line says it for people (never read back);
    --status takes the longest elapsed and the highest peak of a stage's finished tasks (their outcome records'),
    and their CPU time summed."""
    from shard_pipeline.run.outcome import TaskFigures, own_figures
    from shard_pipeline.run.render import figures_summary
    from shard_pipeline.run.stage_status import StageStatus
    from shard_pipeline.run.tasklog import figures_line

    mine = own_figures()
    assert mine.wall_s > 0 and mine.cpu_s > 0 and mine.max_rss_mb > 5  # this interpreter's own peak, in MB
    figures = [TaskFigures(61.0, 50.0, 812_000_000), TaskFigures(3725.0, 70.0, 90_500_000)]
    log = tmp_path / "0.log"
    log.write_text(f"2026-12-02T19:20:01 write task 0 done: 1 shards\n"
                   f"2026-12-02T19:20:01 {figures_line('write', 0, figures[0])}\n")
    assert last_progress_line(log) is None  # a figures line is not progress
    st = StageStatus("write", 3, done=2, figures=figures)
    assert figures_summary(st) == ("FINISHED write 2 tasks: elapsed up to 1h02m05s, peak memory 812.0 MB, "
                                   "cpu 2.0 min in all")


def test_a_task_of_two_seconds_is_not_shown_as_taking_nothing():
    from shard_pipeline.run.render import _hms

    assert _hms(2.4) == "2.4s" and _hms(0.04) == "0.0s" and _hms(62) == "0h01m02s" and _hms(3725) == "1h02m05s"
