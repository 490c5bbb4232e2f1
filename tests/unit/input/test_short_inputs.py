"""Inputs the counts index knows as larger stop a run before anything is queued, unless the release changed;
index rows that cannot be true are named and ignored (input/index_check.py, run/short_inputs.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from shard_pipeline.input.corpus import InputShard
from shard_pipeline.input.counts_index import CountRow, record
from shard_pipeline.input.index_check import (
    RELEASE_CHANGED,
    InputShorterThanIndex,
    refuse_shortfalls,
    shortfalls,
    submit_step,
)
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.view import report
from shard_pipeline.stages.partition import run_partition
from shard_pipeline.stages.finalize import run_finalize
from shard_pipeline.stages.plan import run_plan
from shard_pipeline.stages.write import run_write
from shard_pipeline.submit import launch, scope
from shard_pipeline.submit.cli import parse
from shard_pipeline.submit.args import Request
from tests.pipeline_util import LANG, LICENSE, index_file, lang_dir, make_corpus, read_rows, run_cli

WHEN = "2026-01-01T00:00:00Z"
SHARD = "9_1.ia.jsonl.zst"


def row(name: str, size: int, docs: int, mtime: int = 1) -> CountRow:
    return CountRow(name + ".jsonl.zst", size, mtime, docs, "hplt-shard-read", WHEN)


def local(name: str, size: int | None) -> InputShard:
    return InputShard(name, f"/data/{name}.jsonl.zst", size, 1 if size is not None else None, f"x/{name}")


# ---------------------------------------------------------------------------- the pure decision


def test_a_file_smaller_than_its_row_is_a_shortfall_by_bytes() -> None:
    (s,) = shortfalls({"9_1.jsonl.zst": row("9_1", 5000, 40)}, [local("9_1", 3000)])
    assert (s.kind, s.row.bytes, s.row.docs, s.file_bytes, s.file_docs) == ("fewer-bytes", 5000, 40, 3000, None)


def test_fewer_documents_than_the_row_is_a_shortfall_once_read_to_the_end() -> None:
    rows = {"9_1.jsonl.zst": row("9_1", 5000, 40)}
    assert shortfalls(rows, [local("9_1", 5000)]) == []  # not read yet: nothing to compare
    (s,) = shortfalls(rows, [local("9_1", 5000)], {"9_1": 39})
    assert (s.kind, s.file_docs) == ("fewer-documents", 39)
    assert shortfalls(rows, [local("9_1", 5000)], {"9_1": 40}) == []


def test_a_url_input_is_compared_by_documents_only() -> None:
    rows = {"10_1.jsonl.zst": row("10_1", 5000, 42)}
    assert shortfalls(rows, [local("10_1", None)]) == []
    assert [s.kind for s in shortfalls(rows, [local("10_1", None)], {"10_1": 41})] == ["fewer-documents"]


def test_a_file_larger_than_its_row_is_no_shortfall() -> None:
    """A row counted from a cut copy, the file whole now: the read replaces the row (a warning, not a refusal)."""
    rows = {"9_1.jsonl.zst": row("9_1", 3000, 25), "9_2.jsonl.zst": row("9_2", 100, 1)}
    assert shortfalls(rows, [local("9_1", 5000), local("9_3", 1)], {"9_1": 40}) == []
    # larger and with fewer documents: an edited file, not a cut one; the run counts it anew
    assert shortfalls(rows, [local("9_1", 5000)], {"9_1": 6}) == []


def test_the_refusal_is_typed_and_names_both_ways_on() -> None:
    rows = {"9_1.jsonl.zst": row("9_1", 5000, 40)}
    with pytest.raises(InputShorterThanIndex) as e:
        refuse_shortfalls_of(rows, accept=False)
    assert e.value.kind == "input-shorter-than-index" and e.value.index_file == Path("/idx/eng_Latn.tsv")
    assert [s.kind for s in e.value.shortfalls] == ["fewer-bytes"]
    assert RELEASE_CHANGED in e.value.next_step and e.value.shortfalls[0].location == "/data/9_1.jsonl.zst"
    assert [s.kind for s in refuse_shortfalls_of(rows, accept=True)] == ["fewer-bytes"]  # the word: accepted


def refuse_shortfalls_of(rows: dict, accept: bool) -> list:
    from shard_pipeline.input.counts_index import IndexRows

    index = IndexRows(Path("/idx/eng_Latn.tsv"), rows, {})
    return refuse_shortfalls(index, [local("9_1", 3000)], {}, accept, submit_step)


# ---------------------------------------------------------------------------- submit, plan and resume


def cut_at_a_frame_boundary(path: Path) -> tuple[int, int]:
    """Keep only the first zstd frame of a multi-frame file: a valid stream, fewer documents. (bytes before, after)"""
    data = path.read_bytes()
    obj = zstandard.ZstdDecompressor().decompressobj()
    obj.decompress(data)
    cut = len(data) - len(obj.unused_data)
    assert 0 < cut < len(data)
    path.write_bytes(data[:cut])
    return len(data), cut


def request(root: Path, tmp: Path, *extra: str, executor: str = "local") -> tuple[Request, list[str]]:
    argv = [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp / "out"), "--run-dir",
            str(tmp / "run"), "--executor", executor, "--license", LICENSE, "--counts-index", str(tmp / "index"),
            "--partition-tasks", "1", "--shard-rows", "10", *extra]
    return Request.from_args(parse(argv)), argv


def whole_rows(root: Path, idx: Path, docs_per_file: int) -> None:
    """The index as a full read of the whole corpus leaves it."""
    rows = []
    for path in sorted((root / LANG).glob("*.jsonl.zst")):
        st = path.stat()
        rows.append(CountRow(path.name, st.st_size, int(st.st_mtime), docs_per_file, "hplt-shard-read", WHEN))
    record(idx, *index_file(idx, root).relative_to(idx).parts[:2], LANG, rows)


def test_a_cut_file_stops_the_submit_before_anything_is_queued(tmp_path, fake_slurm) -> None:
    root = make_corpus(tmp_path, n_docs=80, frames=4)
    whole_rows(root, tmp_path / "index", 20)
    before, after = cut_at_a_frame_boundary(root / LANG / SHARD)
    args, argv = request(root, tmp_path, executor="slurm")
    with pytest.raises(InputShorterThanIndex) as e:
        launch.new_run(args, argv)
    (s,) = e.value.shortfalls
    assert (s.kind, s.location, s.row.bytes, s.file_bytes) == ("fewer-bytes", str(root / LANG / SHARD), before, after)
    assert RELEASE_CHANGED in e.value.next_step
    assert fake_slurm("sbatch") == [] and not (tmp_path / "run").exists()
    args, argv = request(root, tmp_path, "--dry-run", executor="slurm")
    with pytest.raises(InputShorterThanIndex):  # the dry run says it too
        launch.new_run(args, argv)


def test_a_row_with_more_documents_than_the_head_sample_read_stops_the_submit(tmp_path) -> None:
    root = make_corpus(tmp_path, n_docs=80)
    whole_rows(root, tmp_path / "index", 25)  # the same sizes, 5 documents more than each file holds
    args, argv = request(root, tmp_path, "--dry-run")
    with pytest.raises(InputShorterThanIndex) as e:
        launch.new_run(args, argv)
    assert sorted((s.kind, s.file_docs, s.row.docs) for s in e.value.shortfalls) == [("fewer-documents", 20, 25)] * 4


def test_a_row_that_cannot_be_true_is_named_and_the_run_counts_that_file_itself(tmp_path, capsys) -> None:
    root = make_corpus(tmp_path, n_docs=80)
    idx = tmp_path / "index"
    path = index_file(idx, root)
    path.parent.mkdir(parents=True)
    sizes = {p.name: p.stat().st_size for p in (root / LANG).glob("*.jsonl.zst")}
    path.write_text("shard\tbytes\tmtime\tdocs\tmethod\tcounted\n"
                    f"{SHARD}\t{sizes[SHARD]}\t1\t-40\tm\t{WHEN}\n"
                    f"9_2.cc.jsonl.zst\t{sizes['9_2.cc.jsonl.zst']}\t1\t100000000000\tm\t{WHEN}\n")
    args, _ = request(root, tmp_path, "--dry-run")
    sc = scope.prepare(args, scope.resolve_settings(args), "local", budget=8)
    assert sorted(r.shard for r in sc.impossible) == ["9_1.ia.jsonl.zst", "9_2.cc.jsonl.zst"]
    assert sc.known == {} and sc.lay.est_docs == 80 and sc.lay.docs_known == 80  # counted by the head sample
    err = capsys.readouterr().err
    assert err.count("cannot be true") == 2 and f"{path}: the row of {SHARD}" in err


def _submitted(tmp_path: Path, fake_slurm) -> tuple[Path, RunDir]:
    root = make_corpus(tmp_path, n_docs=80, frames=4)
    (tmp_path / "t.conf").write_text("PRESET=local\nACCOUNT=p\n")
    args, argv = request(root, tmp_path, "--conf", str(tmp_path / "t.conf"), executor="slurm")
    assert launch.new_run(args, argv) == 0
    return root, RunDir(lang_dir(tmp_path / "run"))


def test_a_row_with_more_documents_stops_the_plan_and_the_resume_until_the_word(tmp_path, fake_slurm) -> None:
    """A row the index got after the submit (or a count that was wrong for the same file): the plan, which knows
    every input's documents, refuses before OUT.tmp; a resume refuses before queuing; --release-changed goes on."""
    root, run = _submitted(tmp_path, fake_slurm)
    st = (root / LANG / SHARD).stat()
    record(tmp_path / "index", *index_file(tmp_path / "index", root).relative_to(tmp_path / "index").parts[:2], LANG,
           [CountRow(SHARD, st.st_size, int(st.st_mtime), 25, "other-tool", WHEN)])
    run_partition(run, 0)
    with pytest.raises(InputShorterThanIndex) as e:
        run_plan(run)
    assert [(s.kind, s.file_docs, s.row.docs) for s in e.value.shortfalls] == [("fewer-documents", 20, 25)]
    assert f"--resume {run.root} {RELEASE_CHANGED}" in e.value.next_step and "start a new run" in e.value.next_step
    assert not run.plan_json.exists() and not (tmp_path / "out.tmp").exists()
    queued = len(fake_slurm("sbatch"))
    with pytest.raises(InputShorterThanIndex):
        launch.resume_run(Request.from_args(parse(["--resume", str(run.root)])), ["--resume", str(run.root)])
    assert len(fake_slurm("sbatch")) == queued
    argv = ["--resume", str(run.root), RELEASE_CHANGED]
    assert launch.resume_run(Request.from_args(parse(argv)), argv) == 0
    assert json.loads(run.config_json.read_text())["execution"]["release_changed"] is True
    assert len(fake_slurm("sbatch")) > queued
    plan = run_plan(run)
    assert plan.conservation.read == 80
    for task in range(len(plan.write_tasks)):
        run_write(run, task)
    run_finalize(run)  # the word reaches finalize: the smaller row replaces the index's, said in validation.json
    assert read_rows(tmp_path / "index", *index_file(tmp_path / "index", root).relative_to(tmp_path / "index")
                     .parts[:2], LANG)[SHARD].docs == 20
    (warning,) = json.loads(run.validation_json.read_text())["warnings"]
    assert SHARD in warning and RELEASE_CHANGED in warning and "25 documents -> " in warning


def test_a_row_larger_than_the_file_stops_a_resume_before_partition(tmp_path, fake_slurm) -> None:
    root, run = _submitted(tmp_path, fake_slurm)
    st = (root / LANG / SHARD).stat()
    record(tmp_path / "index", *index_file(tmp_path / "index", root).relative_to(tmp_path / "index").parts[:2], LANG,
           [CountRow(SHARD, st.st_size + 100, int(st.st_mtime), 20, "other-tool", WHEN)])
    with pytest.raises(InputShorterThanIndex) as e:
        launch.resume_run(Request.from_args(parse(["--resume", str(run.root)])), ["--resume", str(run.root)])
    assert [s.kind for s in e.value.shortfalls] == ["fewer-bytes"]


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_file_cut_at_a_frame_boundary_is_refused_then_accepted_with_the_word(tmp_path, capsys) -> None:
    """The users' case: a multi-frame shard cut exactly between frames is a valid stream. A run over the whole
    corpus fills the index; over the cut file a run is refused before its run dir exists; with --release-changed
    it completes, the index records the smaller row and --status says so."""
    root = make_corpus(tmp_path, n_docs=80, frames=4)
    idx = tmp_path / "index"
    opts = ("--counts-index", str(idx), "--shard-rows", "10")
    assert run_cli(root, tmp_path / "out1", tmp_path / "run1", *opts) == 0
    whole = read_rows(idx, *index_file(idx, root).relative_to(idx).parts[:2], LANG)[SHARD]
    before, after = cut_at_a_frame_boundary(root / LANG / SHARD)
    assert whole.bytes == before and whole.docs == 20
    capsys.readouterr()
    assert run_cli(root, tmp_path / "out2", tmp_path / "run2", *opts) == 2
    err = capsys.readouterr().err
    assert f"{root / LANG / SHARD}: the index knows it as {before} bytes, 20 documents; the file has {after} bytes" in err
    assert not (tmp_path / "run2").exists() and not (tmp_path / "out2").exists()
    assert read_rows(idx, *index_file(idx, root).relative_to(idx).parts[:2], LANG)[SHARD] == whole
    assert run_cli(root, tmp_path / "out2", tmp_path / "run2", *opts, RELEASE_CHANGED) == 0
    now = read_rows(idx, *index_file(idx, root).relative_to(idx).parts[:2], LANG)[SHARD]
    assert now.bytes == after and now.docs == 5
    validation = json.loads((lang_dir(tmp_path / "run2") / "validation.json").read_text())
    assert validation["inputs"] and sum(i["read"] for i in validation["inputs"]) == 65
    (warning,) = [w for w in validation["warnings"] if SHARD in w]
    assert RELEASE_CHANGED in warning and f"{before} bytes" in warning and f"{after} bytes" in warning
    text, code = report(tmp_path / "run2")
    assert code == 0 and warning in text
