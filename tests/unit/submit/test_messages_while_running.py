"""Messages a person reads while a run lives (#21): counts with the right noun, close language
names only, and the SPDX license id checked against the SPDX list."""
from __future__ import annotations

import json
import re

import pytest

from shard_pipeline.input.corpus import close_languages
from shard_pipeline.submit import cli
from shard_pipeline.units import plural
from tests.pipeline_util import LANG, make_corpus, run_cli


def test_plural_says_one_shard_and_two_shards():
    assert [plural(n, "shard") for n in (0, 1, 2, 1000)] == ["0 shards", "1 shard", "2 shards", "1,000 shards"]
    assert plural(1, "input shard") == "1 input shard" and plural(3, "array task") == "3 array tasks"


@pytest.mark.slow  # end-to-end: runs the pipeline
def test_a_run_of_one_input_and_one_shard_says_so_in_the_singular(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=12, names=("9_1.cc",))
    assert run_cli(root, tmp_path / "out", tmp_path / "run") == 0
    out, err = capsys.readouterr()
    one_shards = re.search(r"(?<![\d.,])1 shards", out + err)  # not a rate such as "3067.1 shards/min"
    assert "12 documents in 1 shard " in out and "; 1 input shard;" in err and not one_shards, out + err
    assert "plan      1/1 job" in err and "1 buckets" not in err
    assert cli.main(["--verify", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == "OK: 12 rows in 1 shard verified"


@pytest.mark.parametrize("lang,known,expect", [
    ("deu_Latn", ["eng_Latn", "fin_Latn"], []),  # the shared _Latn made eng_Latn look close
    ("eng_latn", ["eng_Latn", "deu_Latn"], ["eng_Latn"]),  # case
    ("zho_Hanz", ["zho_Hans", "zho_Hant", "eng_Latn"], ["zho_Hans", "zho_Hant"]),  # same code, other script
    ("dex_Latn", ["deu_Latn", "eng_Latn"], ["deu_Latn"]),  # one letter off
    ("english", ["eng_Latn"], []),
])
def test_did_you_mean_offers_only_close_language_names(lang, known, expect):
    assert close_languages(lang, known) == expect


def test_an_unknown_language_is_not_offered_a_far_one(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=5, names=("9_1.cc",))
    assert cli.main(["deu_Latn", "--local-root", str(root), "--out", str(tmp_path / "o"), "--license", "CC0-1.0",
                     "--executor", "local", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown language 'deu_Latn'" in err and "did you mean" not in err and "1 language there" in err, err
    assert LANG == "eng_Latn"


@pytest.mark.parametrize("given,refusal", [
    ("cc0", "did you mean CC0-1.0?"), ("CC0", "did you mean CC0-1.0?"), ("foo", "is not an SPDX license id"),
    ("CC-BY-4", "did you mean CC-BY-4.0"),
])
def test_a_license_off_the_spdx_list_is_refused_with_the_close_ids(tmp_path, capsys, given, refusal):
    root = make_corpus(tmp_path, n_docs=5, names=("9_1.cc",))
    assert cli.main([LANG, "--local-root", str(root), "--out", str(tmp_path / "o"), "--license", given,
                     "--executor", "local", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"LICENSE {given!r} is not an SPDX license id" in err and refusal in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow  # end-to-end: runs the pipeline
def test_a_license_in_another_case_lands_as_the_canonical_spdx_id_in_rows_manifest_and_card(tmp_path, capsys):
    import pyarrow.parquet as pq

    from shard_pipeline.submit.settings import check_setting

    assert check_setting("LICENSE", "CC0-1.0", "x") == "CC0-1.0" and check_setting("LICENSE", "LicenseRef-HPLT", "x")
    root = make_corpus(tmp_path, n_docs=12, names=("9_1.cc",))
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--dataset-card") == 0  # run_cli passes --license CC0-1.0 first
    reference = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert cli.main([LANG, "--local-root", str(root), "--out", str(tmp_path / "out2"), "--run-dir", str(tmp_path / "r2"),
                     "--executor", "local", "--license", "cc0-1.0", "--dataset-card"]) == 0
    rows = pq.read_table(sorted((tmp_path / "out2").glob("shard-*.parquet"))[0], columns=["license_spdx"])
    assert set(rows.column("license_spdx").to_pylist()) == {"CC0-1.0"}
    card = (tmp_path / "out2" / "README.md").read_text()
    assert "CC0-1.0" in card and "license: cc0-1.0" in card.replace('"', "")  # the Hub's id is the SPDX id lowercased
    assert "CC0-1.0" in (tmp_path / "out2" / "_LEDGER.jsonl").read_text()
    # the same content config as --license CC0-1.0, so the same bytes: a valid id changes nothing
    again = {p.name: p.read_bytes() for p in (tmp_path / "out2").iterdir() if p.is_file()}
    assert again.keys() == reference.keys()
    for name in reference:
        if name not in ("_LEDGER.jsonl", "README.md", "_MANIFEST.json"):  # these name the input paths / hashes
            assert again[name] == reference[name], name
    m1, m2 = (json.loads((d / "_MANIFEST.json").read_text()) for d in (out, tmp_path / "out2"))
    assert m1["config_sha256"] == m2["config_sha256"]
