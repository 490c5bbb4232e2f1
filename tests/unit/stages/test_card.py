"""shard_pipeline.stages.card: the dataset card loads with `datasets` and agrees with DuckDB; the ledger."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from shard_pipeline.contract.rules import Doc, split_of
from shard_pipeline.contract.shard import write_shards
from shard_pipeline.input import synth
from shard_pipeline.stages.balance import balance_report
from shard_pipeline.stages.card import (
    LEDGER_KEYS,
    dataset_card,
    hf_license,
    ledger_bytes,
    ledger_rows,
    size_category,
)
from shard_pipeline.stages.clean_policy import CleanPolicy, summary

VAL_PERMILLE = 200
PROVENANCE = {
    "license_spdx": "CC0-1.0",
    "source": "HPLT v4 clean, eng_Latn (synthetic test fixture)",
    "selection": "WDS bins 9-10",
    "tool": "hplt-shard 0.1.0",
    "tool_commit": "0123456789abcdef0123456789abcdef01234567",
    "language": ["en"],
}


def make_docs(n: int, seed: int = 0) -> list[Doc]:
    rng = random.Random(seed)
    return [
        Doc(
            id=f"web:{i}",
            text=synth._text(rng, rng.randint(100, 2000)),
            meta={"url": f"https://example.org/{i}", "license_spdx": "CC0-1.0", "source_id": f"10_{i % 3 + 1}", "lang": "eng_Latn"},
        )
        for i in range(n)
    ]


def split_counts(docs: list[Doc]) -> tuple[int, int]:
    val = sum(split_of(hashlib.sha256(d.text.encode()).digest(), VAL_PERMILLE) == "val" for d in docs)
    return len(docs) - val, val


def duck_counts(out: Path) -> tuple[int, int]:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    try:
        total, val = con.execute(f"SELECT count(*), sum(split='val') FROM read_parquet('{out}/**/*.parquet')").fetchone()
    finally:
        con.close()
    return int(total), int(val or 0)


def front_matter(card: str) -> dict:
    yaml = pytest.importorskip("yaml")
    assert card.startswith("---\n")
    head, _, _ = card[4:].partition("\n---\n")
    return yaml.safe_load(head)


def write_column_layout(out: Path, docs: list[Doc]) -> dict:
    manifest = write_shards(docs, out, dataset="hplt-eng-test", version="1", shard_rows=105, val_permille=VAL_PERMILLE)
    manifest = dict(manifest)
    manifest["balance"] = balance_report([s["text_bytes"] for s in manifest["shards"]], (2, 4))
    return manifest


def write_dirs_layout(out: Path, docs: list[Doc]) -> dict:
    """train/ and validation/ subfolders (two write_shards outputs) and a combined manifest."""
    by_split = {"train": [], "val": []}
    for d in docs:
        by_split[split_of(hashlib.sha256(d.text.encode()).digest(), VAL_PERMILLE)].append(d)
    out.mkdir(parents=True)
    m_train = write_shards(by_split["train"], out / "train", dataset="hplt-eng-test", version="1", shard_rows=100, val_permille=VAL_PERMILLE)
    m_val = write_shards(by_split["val"], out / "validation", dataset="hplt-eng-test", version="1", shard_rows=100, val_permille=VAL_PERMILLE)
    return {
        "format": m_train["format"],
        "dataset": "hplt-eng-test",
        "version": "1",
        "config_sha256": "ab" * 32,
        "rows": m_train["rows"] + m_val["rows"],
        "text_bytes": m_train["text_bytes"] + m_val["text_bytes"],
        "splits": {"train": m_train["splits"]["train"], "val": m_val["splits"]["val"]},
        "params": m_train["params"],
        "shards": [{**s, "name": "train/" + s["name"]} for s in m_train["shards"]]
        + [{**s, "name": "validation/" + s["name"]} for s in m_val["shards"]],
    }


# ---------------------------------------------------------------- loading with datasets and DuckDB


def test_column_layout_loads_with_datasets_and_duckdb(tmp_path, hf):
    docs = make_docs(420)
    train, val = split_counts(docs)
    assert train and val
    out = tmp_path / "out"
    manifest = write_column_layout(out, docs)
    policy = summary(CleanPolicy(), 7, {"char_run": 4, "control_chars": 5})
    card = dataset_card(manifest, layout="column", ledger_name="_LEDGER.jsonl", policy=policy, provenance=PROVENANCE)
    (out / "README.md").write_text(card, encoding="utf-8")
    (out / "_LEDGER.jsonl").write_bytes(ledger_bytes(ledger_rows(_inputs())))

    cache = tmp_path / "hf-cache"
    ds = hf.load_dataset(str(out), cache_dir=str(cache))
    assert set(ds) == {"train"}
    assert ds["train"].num_rows == train == manifest["splits"]["train"]
    assert set(ds["train"]["split"]) == {"train"}
    vds = hf.load_dataset(str(out), "validation", cache_dir=str(cache))
    assert set(vds) == {"validation"}
    assert vds["validation"].num_rows == val == manifest["splits"]["val"]
    assert set(vds["validation"]["split"]) == {"val"}
    assert sorted([*ds["train"]["id"], *vds["validation"]["id"]]) == sorted(d.id for d in docs)
    assert duck_counts(out) == (len(docs), val)


def test_dirs_layout_loads_with_datasets_and_duckdb(tmp_path, hf):
    docs = make_docs(380, seed=1)
    train, val = split_counts(docs)
    out = tmp_path / "out"
    manifest = write_dirs_layout(out, docs)
    card = dataset_card(manifest, layout="dirs", ledger_name="_LEDGER.jsonl", policy=None, provenance=PROVENANCE)
    (out / "README.md").write_text(card, encoding="utf-8")
    (out / "_LEDGER.jsonl").write_bytes(ledger_bytes(ledger_rows(_inputs())))

    ds = hf.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert set(ds) == {"train", "validation"}
    assert ds["train"].num_rows == train == manifest["splits"]["train"]
    assert ds["validation"].num_rows == val == manifest["splits"]["val"]
    assert set(ds["train"]["split"]) == {"train"} and set(ds["validation"]["split"]) == {"val"}
    assert duck_counts(out) == (len(docs), val)


def test_a_split_without_rows_is_left_out(tmp_path, hf):
    docs = make_docs(150, seed=2)
    out = tmp_path / "out"
    manifest = write_shards(docs, out, dataset="d", version="1", shard_rows=100, val_permille=0)
    card = dataset_card(manifest, layout="column", ledger_name="_LEDGER.jsonl", policy=None, provenance=PROVENANCE)
    fm = front_matter(card)
    assert [c["config_name"] for c in fm["configs"]] == ["default"]
    (out / "README.md").write_text(card, encoding="utf-8")
    ds = hf.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert set(ds) == {"train"} and ds["train"].num_rows == 150


def test_an_empty_train_split_is_left_out_too(tmp_path, hf):
    docs = make_docs(40, seed=3)
    out = tmp_path / "out"
    manifest = write_shards(docs, out, dataset="d", version="1", shard_rows=100, val_permille=1000)
    card = dataset_card(manifest, layout="column", ledger_name="_LEDGER.jsonl", policy=None, provenance=PROVENANCE)
    assert [(c["config_name"], c["data_files"][0]["split"]) for c in front_matter(card)["configs"]] == [("default", "validation")]
    (out / "README.md").write_text(card, encoding="utf-8")
    ds = hf.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert set(ds) == {"validation"} and ds["validation"].num_rows == 40


# ---------------------------------------------------------------- the card's content


def _manifest(rows=1234, val=56, balance=True):
    m = {
        "format": "hplt-shard/corpus-shard/1",
        "dataset": "hplt-v4-eng",
        "version": "2026.1",
        "config_sha256": "cd" * 32,
        "rows": rows,
        "text_bytes": 4_567_890,
        "splits": {"train": rows - val, "val": val},
        "params": {"shard_rows": 1000, "val_permille": 5, "row_group_bytes": 64 << 20},
        "shards": [{"name": f"shard-0000{i}-of-00004.parquet", "rows": 1, "bytes": 1000 + i, "sha256": "0" * 64, "text_bytes": 1} for i in range(4)],
    }
    if balance:
        m["balance"] = {"2": {"shards_per_rank": 2, "max_relative_load_deviation": 0.014942}, "4": {"shards_per_rank": 1, "max_relative_load_deviation": 0.003888}}
    return m


def test_front_matter():
    card = dataset_card(_manifest(), layout="dirs", ledger_name="_LEDGER.jsonl", policy=summary(CleanPolicy(), 3, {}), provenance=PROVENANCE)
    fm = front_matter(card)
    assert fm["license"] == "cc0-1.0"
    assert fm["task_categories"] == ["text-generation"]
    assert fm["size_categories"] == ["1K<n<10K"]
    assert fm["language"] == ["en"]
    assert fm["pretty_name"] == "hplt-v4-eng 2026.1"
    assert fm["tags"] == ["pretraining", "parquet", "web", "cleaned", "distributed-training"]
    assert fm["configs"] == [
        {
            "config_name": "default",
            "data_files": [
                {"split": "train", "path": "train/shard-*.parquet"},
                {"split": "validation", "path": "validation/shard-*.parquet"},
            ],
        }
    ]
    column = front_matter(dataset_card(_manifest(balance=False), layout="column", ledger_name="L", policy=None, provenance=PROVENANCE))
    assert column["tags"] == ["pretraining", "parquet", "web"]
    assert column["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "shard-*.parquet"}], "filters": [["split", "==", "train"]]},
        {"config_name": "validation", "data_files": [{"split": "validation", "path": "shard-*.parquet"}], "filters": [["split", "==", "val"]]},
    ]


def test_body_states_counts_rule_policy_balance_and_provenance():
    policy = summary(CleanPolicy(), 9_614, {"max_bytes": 3, "char_run": 9_611, "base64_blob": 20})
    card = dataset_card(_manifest(), layout="column", ledger_name="_LEDGER.jsonl", policy=policy, provenance={**PROVENANCE, "crawl": "CC-MAIN-2024|10"})
    for needle in (
        "| train | 1,178 |",
        "| validation | 56 |",
        "| total | 1,234 |",
        "| text (UTF-8 bytes) | 4,567,890 |",
        "| shards | 4 |",
        "| stored (Parquet bytes) | 4,006 |",
        "big-endian unsigned integer, modulo 1000 are below 5 (0.5%)",
        "set aside 9,614 documents",
        "| `char_run` | 9,611 |",
        "| `whitespace_padding` | 0 |",
        "more than 10,000 times in a row",
        "| 2 | 2 | 1.4942% |",
        "| 4 | 1 | 0.3888% |",
        "`" + "cd" * 32 + "`",
        "| tool commit | 0123456789abcdef0123456789abcdef01234567 |",
        "| selection | WDS bins 9-10 |",
        "`_LEDGER.jsonl`",
        "| crawl | CC-MAIN-2024\\|10 |",
        "## Content notice",
        'load_dataset("path/to/this/dataset", "validation")',
    ):
        assert needle in card, needle
    assert "## Cleaning" not in dataset_card(_manifest(), layout="column", ledger_name="L", policy=None, provenance=PROVENANCE)
    assert "## Balance" not in dataset_card(_manifest(balance=False), layout="column", ledger_name="L", policy=None, provenance=PROVENANCE)


def test_card_says_pii_is_counted_not_redacted_and_where_the_other_files_are():
    """HPLT stores PII spans and does not redact them (docs/hplt-mapping.md): the card must not say otherwise."""
    policy = summary(CleanPolicy(), 2, {"char_run": 2})
    card = dataset_card(_manifest(), layout="column", ledger_name="_LEDGER.jsonl", policy=policy, provenance=PROVENANCE)
    assert "redacted upstream" not in card
    field = next(line for line in card.splitlines() if line.startswith("| `pii_redactions` |"))
    assert "does not redact" in field and "still in `text`" in field
    assert "Personal data is not redacted" in card
    for name in ("__quarantine/clean/documents.parquet", "__quarantine/clean/policy.json", "__balance/balance.json"):
        assert f"`{name}`" in card, name
    assert 'ignore_prefixes=[".", "_", "README"]' in card  # how pyarrow reads around the card itself
    bare = dataset_card(_manifest(balance=False), layout="column", ledger_name="L", policy=None, provenance=PROVENANCE)
    assert "_quarantine" not in bare and "__balance/balance.json" not in bare  # no pointer to a file the output lacks


def test_card_is_deterministic_and_machine_independent(tmp_path):
    args = dict(layout="dirs", ledger_name="_LEDGER.jsonl", policy=summary(CleanPolicy(), 1, {"char_run": 1}), provenance=PROVENANCE)
    a = dataset_card(_manifest(), **args)
    assert a == dataset_card(json.loads(json.dumps(_manifest())), **args)
    assert str(tmp_path) not in a and str(Path.home()) not in a
    assert a.endswith("\n") and "\r" not in a


def test_card_rejects_bad_arguments():
    with pytest.raises(ValueError):
        dataset_card(_manifest(), layout="flat", ledger_name="L", policy=None, provenance=PROVENANCE)
    with pytest.raises(ValueError):
        dataset_card(_manifest(), layout="dirs", ledger_name="L", policy=None, provenance={"source": "x"})


def test_size_categories_and_license():
    assert [size_category(n) for n in (0, 999, 1000, 9_999, 10_000, 999_999, 10**6, 2_103_321_326, 10**12 - 1, 10**12, 10**15)] == [
        "n<1K", "n<1K", "1K<n<10K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "1B<n<10B", "100B<n<1T", "n>1T", "n>1T",
    ]
    assert hf_license("CC0-1.0") == "cc0-1.0"
    assert hf_license("CC-BY-4.0") == "cc-by-4.0"
    assert hf_license("LicenseRef-HPLT") == "other"
    fm = front_matter(dataset_card(_manifest(), layout="dirs", ledger_name="L", policy=None, provenance={"license_spdx": "LicenseRef-HPLT"}))
    assert fm["license"] == "other" and fm["license_name"] == "licenseref-hplt"


# ---------------------------------------------------------------- ledger


def _inputs() -> list[dict]:
    return [
        {"source_id": "10_1", "location": "/scratch/hplt/4.0/clean/eng_Latn/10_1.jsonl.zst", "bytes": 123_456_789, "mtime": 1_760_000_000, "documents": 5000, "license_spdx": "CC0-1.0", "extra": "dropped"},
        {"license_spdx": "CC0-1.0", "documents": 0, "mtime": None, "bytes": None, "location": "https://data.hplt-project.org/three/sorted/fin_Latn/9_1.jsonl.zst", "source_id": "9_1"},
        {"source_id": "8_2.ia", "location": "/data/hplt/Zürich/äöü/8_2.ia.jsonl.zst", "bytes": 1, "mtime": 2, "documents": 3, "license_spdx": "CC0-1.0"},
    ]


def test_ledger_rows_and_bytes_round_trip():
    inputs = _inputs()
    rows = ledger_rows(inputs)
    assert [list(r) for r in rows] == [list(LEDGER_KEYS)] * 3
    data = ledger_bytes(rows)
    assert data.endswith(b"\n") and data.count(b"\n") == 3
    assert "Zürich/äöü".encode() in data  # ensure_ascii=False: readable, and the same bytes everywhere
    parsed = [json.loads(line) for line in data.decode("utf-8").splitlines()]
    assert parsed == [{k: inp[k] for k in LEDGER_KEYS} for inp in inputs]
    assert [list(p) for p in parsed] == [list(LEDGER_KEYS)] * 3
    assert ledger_bytes(ledger_rows(inputs)) == data
    assert data.splitlines()[0] == (
        b'{"source_id":"10_1","location":"/scratch/hplt/4.0/clean/eng_Latn/10_1.jsonl.zst",'
        b'"bytes":123456789,"mtime":1760000000,"documents":5000,"license_spdx":"CC0-1.0"}'
    )
    assert ledger_bytes([]) == b""


def test_ledger_rejects_untraceable_inputs():
    good = _inputs()[0]
    for bad in (
        {k: v for k, v in good.items() if k != "license_spdx"},
        {**good, "license_spdx": ""},
        {**good, "documents": -1},
        {**good, "documents": None},
        {**good, "bytes": True},
        {**good, "location": ""},
        {**good, "source_id": 7},
    ):
        with pytest.raises(ValueError):
            ledger_rows([bad])
    with pytest.raises(ValueError):
        ledger_bytes([{**ledger_rows([good])[0], "extra": 1}])


def test_card_sizes_print_as_the_card_always_printed_them():
    """The card's text size comes from units.human_bytes; the card is output bytes, so the format is frozen."""
    import random

    from shard_pipeline.units import human_bytes

    def first(n: int) -> str:  # the card's own formatter, before there was one for the whole package
        for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
            if n >= size:
                return f"{n / size:.2f} {unit}"
        return f"{n} B"

    rng = random.Random(12)
    values = [0, 1, 999, 1000, 1001, 999_999, 10**6, 123_456_789, 10**9 - 1, 10**9, 27_500 * 10**9, 10**12,
              10**15, 7 * 10**16 + 3] + [rng.randrange(10 ** rng.randrange(1, 18)) for _ in range(5000)]
    assert [human_bytes(n) for n in values] == [first(n) for n in values]
