"""The job layout: task counts, packing, and the memory each stage is given (layout.py)."""
from __future__ import annotations

import json

from shard_pipeline.submit.layout import (
    MAX_FINALIZE_CPUS,
    at_least,
    finalize_cpus,
    pack_by_bytes,
    parse_mem,
    lay_out_jobs,
    stage_memory,
)
from tests.pipeline_util import lang_dir, make_corpus
from tests.unit.submit.test_submitter import opt, stage_of, submit

HPLT_EN = [16_382_767_553] * 1108  # v4 clean English: 18.15 TB in 1,108 shards


def test_packing_is_balanced_and_keeps_every_input_once():
    sizes = [90, 10, 40, 40, 30, 30, 20, 5]
    packs = pack_by_bytes(sizes, 3)
    assert sorted(i for p in packs for i in p) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in p) for p in packs]
    assert max(loads) - min(loads) <= max(sizes) and max(loads) == 90


def test_sections_are_runs_times_buckets_and_shrink_with_partition_memory():
    kw = dict(docs=7_860_000_000, text_bytes=27_500_000_000_000, inputs=1108, buckets=1965,
              row_group_bytes=64 << 20, text_per_doc=3500)
    small = stage_memory(spill_bytes=512 << 20, **kw)
    big = stage_memory(spill_bytes=2048 << 20, **kw)
    assert small.sorted_runs == 1108 + -(-27_500_000_000_000 // (512 << 20))  # one partial run per input
    assert small.sections == small.sorted_runs * 1965
    assert 3.6 < small.sections / big.sections < 4.1  # 4x the spill budget, ~1/4 of the sections
    assert small.plan_bytes > 4 * big.plan_bytes * 0.9 and small.write_bytes > big.write_bytes
    # tiny runs never have more sections than rows
    tiny = stage_memory(docs=100, text_bytes=10_000, spill_bytes=1 << 20, inputs=4, buckets=50,
                        row_group_bytes=1 << 20, text_per_doc=100)
    assert tiny.sections == 4 * 25


def test_plan_and_writers_get_the_memory_the_model_asks_for_at_hplt_scale():
    lay = lay_out_jobs(HPLT_EN, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G")
    assert (lay.partition_tasks, lay.write_tasks) == (99, 99)
    assert lay.sections > 50_000_000  # 512 MiB runs of 27.5 TB of text
    res = lay.resources
    assert parse_mem(res["plan"].mem) >= 213 * lay.sections and parse_mem(res["write"].mem) > parse_mem("4G")
    assert res["partition"].mem == "4G"  # the user's choice stays for the stage it sizes
    roomy = lay_out_jobs(HPLT_EN, {}, shard_rows=1_000_000, task_budget=200, worker_mem="32G")
    assert roomy.resources["plan"].mem == "32G" and roomy.resources["write"].mem == "32G"  # already enough: unchanged


def test_small_runs_keep_the_configured_memory():
    lay = lay_out_jobs([50_000_000] * 4, {}, shard_rows=100_000, task_budget=20, worker_mem="4G")
    assert (lay.resources["plan"].mem, lay.resources["write"].mem) == ("4G", "4G")
    assert at_least("4G", 5 << 30) == "5G" and at_least("8G", 5 << 30) == "8G"


def test_plan_job_is_submitted_with_the_plan_memory(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root, "--mem", "2G") == 0
    res = json.loads((lang_dir(tmp_path / "run") / "config.json").read_text())["execution"]["resources"]
    by_name = {stage_of(a): opt(a, "--mem") for a in fake_slurm("sbatch")}
    assert by_name == {stage: r["mem"] for stage, r in res.items()}
    assert res["partition"]["mem"] == res["finalize"]["mem"] == "2G"


def test_finalize_gets_cores_for_its_re_hash_at_scale_only():
    assert finalize_cpus(10**9) == 1
    assert finalize_cpus(6 * 3 * 900 * 10**9) == 3  # 3 core-periods of output to hash
    lay = lay_out_jobs(HPLT_EN, {}, shard_rows=1_000_000, task_budget=200, worker_mem="16G")
    assert lay.resources["finalize"].cpus == MAX_FINALIZE_CPUS  # ~17 TB of Parquet


def test_finalize_is_submitted_with_its_cpus(tmp_path, fake_slurm):
    from shard_pipeline.run.runconfig import StageResources
    from shard_pipeline.submit.executors.slurm import (
        SlurmSettings,
        StageJobs,
        sbatch_argv,
    )

    s = SlurmSettings("small", None, "/usr/bin/python3", (), "x")
    argv = sbatch_argv(s, StageJobs("finalize", (0,), StageResources("4G", "00:30:00", 16)), tmp_path, 0, [0], ["1"])
    assert opt(argv, "--cpus-per-task") == "16"
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root) == 0
    assert {opt(a, "--cpus-per-task") for a in fake_slurm("sbatch")} == {"1"}  # a small run: one core each


def test_a_bare_memory_number_is_megabytes_as_for_slurm():
    assert parse_mem("4000") == parse_mem("4000M") == 4000 << 20 and parse_mem("4G") == 4096 << 20
    lays = [lay_out_jobs([50_000_000] * 4, {}, shard_rows=100_000, task_budget=20, worker_mem=m)
            for m in ("4000", "4000M")]
    assert lays[0].spill_bytes == lays[1].spill_bytes == (4000 << 20) // 8
    assert lays[0].resources["write"].mem == "4000" and lays[0].resources["plan"].mem == "4000"  # enough: kept as given


def test_a_garbage_memory_value_is_one_clear_error(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=10)
    from shard_pipeline.submit import cli

    code = cli.main(["eng_Latn", "--corpus", "v4", "--local-root", str(root), "--executor", "local",
                     "--license", "CC0-1.0", "--mem", "lots", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "WORKER_MEM 'lots' is not a Slurm memory size" in err and "Traceback" not in err


def test_many_small_inputs_count_in_the_partition_time_and_projection():
    """8,000 files of 600 B: the bytes say 0 s, the per-input cost says minutes (issue #19, item 11)."""
    from shard_pipeline.submit.layout import PARTITION_SECONDS_PER_INPUT
    from shard_pipeline.submit.projection import project

    many = lay_out_jobs([600] * 8000, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G", partition_tasks=1)
    few = lay_out_jobs([600] * 8, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G", partition_tasks=1)
    assert many.most_unit_inputs == 8000 and few.most_unit_inputs == 8
    assert project(many)[0].seconds >= 8000 * PARTITION_SECONDS_PER_INPUT
    assert many.resources["partition"].time > few.resources["partition"].time == "00:10:00"


def test_local_budget_lays_out_one_partition_and_one_write_unit_per_core():
    from shard_pipeline.submit.layout import lay_out_jobs
    from shard_pipeline.submit.scope import local_budget

    for jobs, cpus in ((1, 1), (2, 1), (2, 2), (8, 1), (8, 4)):
        lay = lay_out_jobs([10 << 20] * 16, {}, shard_rows=1000, task_budget=local_budget(jobs, cpus),
                           worker_mem="4G", cpus=cpus)
        assert (lay.partition_tasks, lay.write_tasks) == (jobs, jobs), (jobs, cpus)


def test_buckets_never_fewer_than_min_buckets_nor_writers():
    from shard_pipeline.submit.layout import MIN_BUCKETS, lay_out_jobs

    for write_tasks in (1, 2, MIN_BUCKETS, 9):
        lay = lay_out_jobs([10 << 20] * 16, {}, shard_rows=100, task_budget=40, worker_mem="4G",
                           write_tasks=write_tasks)
        assert lay.buckets == max(MIN_BUCKETS, write_tasks)


def test_the_projected_shard_count_is_the_plans_rule_dp_ranks_and_shard_bytes_included():
    """The dry-run's shard count comes from the rule the plan cuts by (stages/balance.run_shard_count)."""
    from shard_pipeline.submit.layout import lay_out_jobs

    kw = dict(shard_rows=1000, task_budget=200, worker_mem="4G")
    plain = lay_out_jobs([10 << 20], {0: 5_000}, **kw)
    ranked = lay_out_jobs([10 << 20], {0: 5_000}, dp_ranks=(16, 24), **kw)
    by_bytes = lay_out_jobs([10 << 20], {0: 5_000}, shard_bytes=1 << 20, text_per_doc=2_000, **kw)
    assert plain.est_shards == 5 and ranked.est_shards == 48  # a multiple of lcm(16, 24), as the plan cuts
    assert by_bytes.est_shards == 10  # 5,000 x 2,000 text bytes in shards of about 1 MiB
