"""Configuration: parsed never sourced, errors name file:line, precedence cli > conf > preset > default."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from shard_pipeline.submit.settings import (
    KEYS,
    ConfError,
    Settings,
    load_settings,
    parse_conf,
)

REPO = Path(__file__).resolve().parents[3]
REQUIRED_KEYS = {
    "ACCOUNT",
    "WORKER_PARTITION",
    "PYTHON",
    "MODULE_LOAD_CMD",
    "WORKER_MEM",
    "MAX_TASKS",
    "SUBMIT_LIMIT",
    "COUNTS_INDEX",
    "LICENSE",
    "PRESET",
    "V3_BASE_URL",
    "V3_ROOT",
    "V4_ROOT",
    "TIME_LIMIT",
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def settings(tmp: Path, conf: str | None = None, *, cli: dict | None = None, presets: dict | None = None) -> Settings:
    repo = tmp / "repo"
    repo.mkdir(exist_ok=True)
    for name, text in (presets or {}).items():
        write(repo / "presets" / f"{name}.conf", text)
    conf_path = write(tmp / "my.conf", conf) if conf is not None else None
    return load_settings(cli=cli or {}, conf_path=conf_path, repo_root=repo)


def test_keys_cover_the_issue() -> None:
    assert REQUIRED_KEYS <= set(KEYS) and all(KEYS[k] for k in KEYS)


# --------------------------------------------------------------------------
# parse_conf


def test_parse_conf_format(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.conf",
        "# comment\n\n  ACCOUNT=project_1  \nLICENSE='CC0-1.0'\nPYTHON=\"/opt/py/bin/python\"  # inline comment\n"
        'WORKER_MEM=4G # memory\nV4_ROOT=/data/with#hash\nCOUNTS_INDEX="/path with spaces"\n',
    )
    assert parse_conf(path) == {
        "ACCOUNT": "project_1",
        "LICENSE": "CC0-1.0",
        "PYTHON": "/opt/py/bin/python",
        "WORKER_MEM": "4G",
        "V4_ROOT": "/data/with#hash",
        "COUNTS_INDEX": "/path with spaces",
    }


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("ACCOUNT=a\nACCOUT=b\n", 2, "unknown key ACCOUT (did you mean ACCOUNT?)"),
        ("# x\nthis is not a pair\n", 2, "expected KEY=VALUE"),
        ("ACCOUNT=a\n\nACCOUNT=b\n", 3, "duplicate key ACCOUNT"),
        ("ACCOUNT =a\n", 1, "bad key"),
        ("account=a\n", 1, "bad key"),
        ("export ACCOUNT=a\n", 1, "bad key"),
        ("LICENSE=\n", 1, "empty value"),
        ("LICENSE='CC0-1.0\n", 1, "unterminated"),
        ("LICENSE='CC0'-1.0\n", 1, "after the closing quote"),
    ],
)
def test_parse_errors_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path / "bad.conf", text)
    with pytest.raises(ConfError) as err:
        parse_conf(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)


def test_missing_conf_file(tmp_path: Path) -> None:
    with pytest.raises(ConfError, match="no such conf file"):
        load_settings(cli={}, conf_path=tmp_path / "nope.conf", repo_root=tmp_path)


# --------------------------------------------------------------------------
# nothing is ever run


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / f"pwned-{uuid.uuid4().hex}"


def test_malicious_values_stay_literal(tmp_path: Path, marker: Path) -> None:
    conf = (
        f"ACCOUNT=$(touch {marker})\n"
        f"COUNTS_INDEX=`touch {marker}`\n"
        f"V4_ROOT=/x; touch {marker}\n"
        f'V3_ROOT="$(touch {marker})"\n'
    )
    s = settings(tmp_path, conf)
    assert s.account == f"$(touch {marker})"
    assert str(s.counts_index).endswith(f"`touch {marker}`")
    assert str(s.v4_root) == f"/x; touch {marker}"
    assert str(s.v3_root).endswith(f"$(touch {marker})")
    assert not marker.exists()


@pytest.mark.parametrize(
    "value",
    [
        "module load x; rm -rf /",
        "module load x && touch {m}",
        "module load $(touch {m})",
        "module load `touch {m}`",
        "module load x | tee {m}",
        "module load x > {m}",
        "touch {m}",
        "module purge",
        "module load",
        "module load --force x",
    ],
)
def test_module_load_cmd_rejects_anything_but_module_load(tmp_path: Path, marker: Path, value: str) -> None:
    path = write(tmp_path / "my.conf", f"ACCOUNT=p\nMODULE_LOAD_CMD={value.format(m=marker)}\n")
    with pytest.raises(ConfError) as err:
        load_settings(cli={}, conf_path=path, repo_root=tmp_path)
    assert str(err.value).startswith(f"{path}:2: MODULE_LOAD_CMD")
    assert not marker.exists()


def test_module_load_names_are_kept(tmp_path: Path) -> None:
    s = settings(tmp_path, "MODULE_LOAD_CMD=module load LUMI/24.03 partition/C cray-python@3.11 gcc_12.2+x\n")
    assert s.module_loads == ("LUMI/24.03", "partition/C", "cray-python@3.11", "gcc_12.2+x")
    assert settings(tmp_path, "ACCOUNT=x\n").module_loads == ()


@pytest.mark.parametrize("value", ["python3; rm -rf /", "$(which python)", "`python`", "python3 -c x", "-c", "py|x"])
def test_python_must_be_a_plain_path_or_name(tmp_path: Path, marker: Path, value: str) -> None:
    path = write(tmp_path / "my.conf", f"PYTHON={value}\n")
    with pytest.raises(ConfError) as err:
        load_settings(cli={}, conf_path=path, repo_root=tmp_path)
    assert str(err.value).startswith(f"{path}:1: PYTHON")


@pytest.mark.parametrize(
    "key,good,bad",
    [
        ("WORKER_MEM", ["4G", "500M", "1024", "2T", "256M"], ["4GB", "0", "-1G", "4 G", "lots", "10", "255M", "100M"]),
        ("MAX_TASKS", ["1", "200"], ["0", "-3", "2.5", "ten", "010"]),
        ("SUBMIT_LIMIT", ["220"], ["0", "x"]),
        (
            "TIME_LIMIT",
            ["90", "02:00:00", "1-00:00:00", "30:00", "2-12", "100:59:59"],
            ["0", "1:60:00", "1h", "1-24:00", "00:00:00", "12:5x"],
        ),
        ("LICENSE", ["CC0-1.0", "Apache-2.0", "CC-BY-4.0", "LicenseRef-hplt"], ["CC0 1.0", "cc0/1.0", "$(x)"]),
        ("WORKER_PARTITION", ["small", "small,standard", "dev-g"], ["small; x", "a b", "-p"]),
        (
            "V3_BASE_URL",
            ["https://data.hplt-project.org/three/sorted", "http://127.0.0.1:8000/x"],
            ["ftp://x", "https://x/$(y)", "data.hplt-project.org"],
        ),
    ],
)
def test_value_shapes(tmp_path: Path, key: str, good: list[str], bad: list[str]) -> None:
    attr = key.lower()
    for value in good:
        s = settings(tmp_path, f"{key}={value}\n")
        got = getattr(s, attr)
        assert str(got) == value
    for value in bad:
        path = write(tmp_path / "my.conf", f"ACCOUNT=x\n{key}={value}\n")
        with pytest.raises(ConfError) as err:
            load_settings(cli={}, conf_path=path, repo_root=tmp_path / "repo")
        assert str(err.value).startswith(f"{path}:2: "), value


def test_cli_values_are_validated_too(tmp_path: Path) -> None:
    with pytest.raises(ConfError) as err:
        settings(tmp_path, cli={"MAX_TASKS": "0"})
    assert str(err.value).startswith("command line (MAX_TASKS): ")
    with pytest.raises(ValueError, match="NOT_A_KEY"):
        settings(tmp_path, cli={"NOT_A_KEY": "1"})


# --------------------------------------------------------------------------
# layering


PRESET = (
    "WORKER_PARTITION=preset-part\nWORKER_MEM=2G\nMAX_TASKS=50\nLICENSE=CC0-1.0\n"
    "COUNTS_INDEX=preset-counts\nTIME_LIMIT=30\n"
)


def test_precedence_cli_conf_preset_default(tmp_path: Path) -> None:
    conf = "PRESET=site\nWORKER_MEM=3G\nMAX_TASKS=60\nCOUNTS_INDEX=/abs/counts\n"
    s = settings(tmp_path, conf, cli={"MAX_TASKS": "70", "ACCOUNT": None, "LICENSE": None}, presets={"site": PRESET})
    assert s.max_tasks == 70  # cli over conf over preset
    assert s.worker_mem == "3G"  # conf over preset
    assert s.counts_index == Path("/abs/counts")  # conf over preset
    assert s.worker_partition == "preset-part"  # preset over default
    assert s.license == "CC0-1.0" and s.time_limit == "30"  # preset only
    assert s.account is None and s.submit_limit is None  # nobody set them: defaults
    assert s.v3_base_url == "https://data.hplt-project.org/three/sorted"
    assert s.preset == "site"


def test_runs_go_where_the_conf_says_the_lumi_preset_on_the_projects_scratch(tmp_path: Path) -> None:
    from shard_pipeline.paths import PRESET_DIR

    repo = tmp_path / "repo"
    repo.mkdir()
    lumi = load_settings(cli={"PRESET": "lumi", "ACCOUNT": "project_462001491"}, conf_path=None, repo_root=repo,
                         preset_dir=PRESET_DIR)
    assert lumi.runs_root == Path("/scratch/project_462001491/hplt-shard-runs")
    assert load_settings(cli={"PRESET": "lumi"}, conf_path=None, repo_root=repo, preset_dir=PRESET_DIR).runs_root \
        == repo / "runs"  # no ACCOUNT: never one group's folder
    conf = tmp_path / "c.conf"
    conf.write_text("RUNS_ROOT=scratch/runs\n")
    assert load_settings(cli={}, conf_path=conf, repo_root=repo).runs_root == repo / "scratch" / "runs"


def test_defaults_without_any_conf(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    s = load_settings(cli={}, conf_path=None, repo_root=repo)
    assert s == Settings(
        account=None,
        worker_partition="small",
        python=sys.executable,
        module_loads=(),
        worker_mem="4G",
        max_tasks=200,
        submit_limit=None,
        counts_index=repo / "counts-index",
        runs_root=repo / "runs",
        license=None,
        preset=None,
        v3_base_url="https://data.hplt-project.org/three/sorted",
        v3_root=None,
        v4_root=None,
        time_limit=None,
    )


def test_repo_conf_is_found_and_cli_preset_wins(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "hplt-shard.conf", "PRESET=a\nACCOUNT=from-conf\n")
    write(repo / "presets" / "a.conf", "WORKER_MEM=1G\n")
    write(repo / "presets" / "b.conf", "WORKER_MEM=8G\n")
    s = load_settings(cli={}, conf_path=None, repo_root=repo)
    assert (s.account, s.worker_mem, s.preset) == ("from-conf", "1G", "a")
    s = load_settings(cli={"PRESET": "b"}, conf_path=None, repo_root=repo)
    assert (s.account, s.worker_mem, s.preset) == ("from-conf", "8G", "b")


def test_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = settings(tmp_path, "COUNTS_INDEX=idx\nV4_ROOT=data/clean\n", cli={"V3_ROOT": "here/sorted"})
    repo = tmp_path / "repo"
    assert s.counts_index == repo / "idx" and s.v4_root == repo / "data" / "clean"
    assert s.v3_root == tmp_path / "here" / "sorted"  # command-line paths are relative to the cwd


def test_preset_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfError) as err:
        settings(tmp_path, "ACCOUNT=x\nPRESET=nosuch\n", presets={"lumi": PRESET})
    assert str(err.value).startswith(f"{tmp_path / 'my.conf'}:2: ") and "nosuch" in str(err.value)
    with pytest.raises(ConfError) as err:
        settings(tmp_path, "PRESET=loop\n", presets={"loop": "WORKER_MEM=1G\nPRESET=loop\n"})
    assert str(err.value).startswith(f"{tmp_path / 'repo' / 'presets' / 'loop.conf'}:2: ")
    with pytest.raises(ConfError) as err:
        settings(tmp_path, "PRESET=../etc/x\n")
    assert ":1: PRESET" in str(err.value)
    with pytest.raises(ConfError) as err:
        settings(tmp_path, "PRESET=bad\n", presets={"bad": "MAX_TASKS=many\n"})
    assert str(err.value).startswith(f"{tmp_path / 'repo' / 'presets' / 'bad.conf'}:1: MAX_TASKS")


# --------------------------------------------------------------------------
# the shipped presets and example


def test_shipped_presets_load() -> None:
    lumi = load_settings(cli={"PRESET": "lumi"}, conf_path=REPO / "hplt-shard.conf.example", repo_root=REPO)
    assert lumi.worker_partition == "small" and lumi.worker_mem == "4G"
    assert (lumi.max_tasks, lumi.submit_limit, lumi.license) == (200, 220, "CC0-1.0")
    assert lumi.counts_index is None  # the index is the user's project's: off until ACCOUNT is set
    mine = load_settings(cli={"PRESET": "lumi", "ACCOUNT": "project_465000001"}, conf_path=None, repo_root=REPO)
    assert mine.counts_index == Path("/projappl/project_465000001/hplt-counts")
    assert lumi.v4_root == Path("/appl/local/openeurollm/training/catalogue/hplt/4.0/clean")
    assert lumi.v3_root == Path("/appl/local/openeurollm/training/catalogue/hplt/3.0/sorted")
    assert lumi.v3_base_url == "https://data.hplt-project.org/three/sorted"
    local = load_settings(cli={"PRESET": "local"}, conf_path=REPO / "presets" / "local.conf", repo_root=REPO)
    assert (local.worker_partition, local.worker_mem, local.max_tasks, local.license) == ("small", "1G", 8, "CC0-1.0")
    assert local.counts_index == REPO / "counts-index" and local.v3_root is None and local.v4_root is None


def test_example_documents_every_key_and_sets_only_preset() -> None:
    example = REPO / "hplt-shard.conf.example"
    assert parse_conf(example) == {"PRESET": "lumi"}
    text = example.read_text(encoding="utf-8")
    for key in KEYS:
        assert f"#{key}=" in text or f"\n{key}=" in text, key


@pytest.mark.parametrize("line, said", [
    ("CLEAN_MAX_BYTES=abc", "CLEAN_MAX_BYTES: expected a positive integer, got 'abc'"),
    ("CLEAN_ONE_LINE_SHARE=1.5", "CLEAN_ONE_LINE_SHARE: one_line_share must be a number in [0, 1], got 1.5"),
])
def test_a_bad_clean_threshold_names_its_file_and_line(tmp_path: Path, line: str, said: str) -> None:
    path = write(tmp_path / "my.conf", f"ACCOUNT=p\n{line}\n")
    with pytest.raises(ConfError) as err:
        load_settings(cli={}, conf_path=path, repo_root=tmp_path)
    assert str(err.value) == f"{path}:2: {said}"
    good = settings(tmp_path, "CLEAN_ONE_LINE_SHARE=0.5\n")
    assert good.clean_values == (("CLEAN_ONE_LINE_SHARE", "0.5"),)
