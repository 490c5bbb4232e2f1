"""Memory sizes and time limits: one type each (units.Memory, units.WallTime), read and printed as Slurm does."""
from __future__ import annotations

import pytest

from shard_pipeline.submit.layout import minutes_to_slurm
from shard_pipeline.submit.settings import ConfError, load_settings
from shard_pipeline.units import (
    BadMemorySize,
    BadWallTime,
    Memory,
    WallTime,
    parse_mem,
    scale_mem,
    share_of_mem,
    slurm_minutes,
)


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("5:30", 330), ("02:30:00", 9000), ("1-02", 93600),
                                           ("1-02:03", 93780), ("1-02:03:04", 93784), ("48:00:00", 172800)])
def test_every_slurm_time_form_reads_to_seconds(text, seconds):
    assert WallTime.parse(text).seconds == seconds
    assert WallTime.parse(str(WallTime.parse(text))) == WallTime.parse(text)  # printed, it reads back the same


@pytest.mark.parametrize("text", ["1:60", "1:00:60", "1-24", "x", "", "-5", "1.5"])
def test_a_time_slurm_refuses_is_refused(text):
    with pytest.raises(BadWallTime, match="is not a Slurm time"):
        WallTime.parse(text)


def test_times_double_and_print_as_the_layout_prints_them():
    assert str(WallTime.parse("1:15:00").times(2)) == "02:30:00"
    assert str(WallTime.parse("1-00").times(2)) == "48:00:00"  # every form doubles, not only HH:MM:SS
    assert minutes_to_slurm(16.2) == "00:17:00" and minutes_to_slurm(1) == "00:10:00"  # never under the floor
    assert slurm_minutes("00:17:00") == 17 and slurm_minutes("1-00") == 1440


@pytest.mark.parametrize("text, nbytes", [("4000", 4000 << 20), ("500M", 500 << 20), ("4G", 4 << 30), ("2T", 2 << 40),
                                          ("64K", 64 << 10)])
def test_memory_has_slurms_meaning(text, nbytes):
    assert Memory.parse(text).bytes == parse_mem(text) == nbytes


@pytest.mark.parametrize("text", ["4GB", "4g", "0", "4.5G", "", "G"])
def test_a_memory_size_slurm_refuses_is_refused_by_every_operation(text):
    """`4GB` was refused by parse_mem and accepted by scale_mem: now every operation reads through Memory."""
    for op in (parse_mem, lambda t: scale_mem(t, 2), lambda t: share_of_mem(t, 2)):
        with pytest.raises(BadMemorySize):
            op(text)


def test_memory_scales_in_the_unit_it_was_given():
    assert scale_mem("4G", 8) == "32G" and scale_mem("4000", 2) == "8000"
    assert share_of_mem("32G", 8) == "4G" and share_of_mem("5G", 2) == "2560M"  # rounded up in MiB
    assert str(Memory.parse("5G").share(2).times(2)) == "5120M"


def test_the_conf_reads_times_and_memory_through_the_same_types(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("TIME_LIMIT=1:60\n")
    with pytest.raises(ConfError, match="is not a Slurm time"):
        load_settings(cli={}, conf_path=conf, repo_root=tmp_path, preset_dir=tmp_path)
    conf.write_text("WORKER_MEM=4GB\n")
    with pytest.raises(ConfError, match="is not a Slurm memory size"):
        load_settings(cli={}, conf_path=conf, repo_root=tmp_path, preset_dir=tmp_path)
