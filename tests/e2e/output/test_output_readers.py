"""Issue 13, part 1: OUT opens unchanged in every reader people use, whatever the options.

Every file in OUT that is not a shard has a `_`/`.`-prefixed name (Arrow, Spark and Hadoop skip
those), and the one with another schema lies under `__quarantine/clean/`, out of reach of the
globs `OUT/*.parquet` and `OUT/*/*.parquet` and of `datasets.load_dataset(OUT)` (which skips
`__*` folders, not `_*` ones). The card's README.md is the one exception: the
pyarrow folder readers need `ignore_prefixes` to read around it (tested, and documented in the
README and the card). Each reader must give exactly the manifest's rows: their count, and the
ids `read_shards` (which checks every file against the manifest) gives.

One small corpus (two input files, three documents the clean policy quarantines) is written once
per option set; every reader then reads that output.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.shard import read_shards
from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, LICENSE, manifest, records, run_cli, write_records

pytestmark = pytest.mark.slow  # end-to-end: every test reads the output of a pipeline run

REPO = Path(__file__).resolve().parents[3]
DIRS = ("--split-layout", "dirs")
OPTION_SETS = {
    "default": (),
    "clean": ("--clean",),
    "clean, one shard": ("--clean", "--shard-rows", "1000000"),  # the default shard size: side files outnumber shards
    "card": ("--dataset-card",),
    "dp-ranks": ("--dp-ranks", "2,3"),
    "one byte-balanced shard": ("--shard-bytes", "100000000"),  # a balance file and a single shard
    "dirs": DIRS,
    "clean+card+dp-ranks": ("--clean", "--dataset-card", "--dp-ranks", "2,3"),
    "all, dirs": ("--clean", "--dataset-card", "--dp-ranks", "2,3", *DIRS),
}
QUARANTINED = (3, 7, 11)  # record numbers the clean policy sets aside (below)
PYARROW_AROUND_CARD = {"ignore_prefixes": [".", "_", "README"]}  # how the README and the card say to read around it


def _corpus(root: Path) -> list[dict]:
    recs = records(60, seed=13, text_bytes=300)
    recs[3]["text"] = "x" * 12_000  # char_run
    recs[7]["text"] = "same line\n" * 300  # repeated_lines
    recs[11]["text"] = "\x01\x02 control " * 50  # control_chars
    write_records(root / "clean" / LANG / "9_1.jsonl.zst", recs[:35])
    write_records(root / "clean" / LANG / "9_2.jsonl.zst", recs[35:])
    return recs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("corpus")
    return root / "clean", _corpus(root)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, corpus) -> Callable[[str], Path]:
    """Each option set's output, written on first use and shared by every reader."""
    root, _ = corpus
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            base = tmp_path_factory.mktemp(re.sub(r"\W+", "-", name))
            out = base / "out"
            assert run_cli(root, out, base / "run", "--val-permille", "200", "--shard-rows", "8",
                           "--partition-tasks", "1", "--write-tasks", "1", *OPTION_SETS[name]) == 0  # few processes: fast
            made[name] = out
        return made[name]

    return get


def is_dirs(name: str) -> bool:
    return "--split-layout" in OPTION_SETS[name]


def has_card(name: str) -> bool:
    return "--dataset-card" in OPTION_SETS[name]


def shard_glob(out: Path, name: str) -> str:
    """The glob a user writes: OUT/*.parquet, or OUT/*/*.parquet for the dirs layout."""
    return f"{out}/*/*.parquet" if is_dirs(name) else f"{out}/*.parquet"


def expected(out: Path, corpus) -> tuple[int, Counter]:
    """The manifest's rows and the ids of every row it lists (read_shards checks each file's hash first)."""
    m = manifest(out)
    ids = Counter(d.id for d in read_shards(out))
    assert sum(ids.values()) == m["rows"]
    _, recs = corpus
    cleaned = {recs[k]["id"] for k in QUARANTINED} if "__quarantine/clean/policy.json" in {f["name"] for f in m["files"]} else set()
    assert set(ids) == {r["id"] for r in recs} - cleaned  # nothing lost, nothing quarantined kept
    return m["rows"], ids


# ---------------------------------------------------------------- the readers


def read_pq_table(out: Path, name: str) -> list[str]:
    kw = PYARROW_AROUND_CARD if has_card(name) else {}
    return pq.read_table(out, columns=["id"], **kw).column("id").to_pylist()


def read_pa_dataset(out: Path, name: str) -> list[str]:
    kw = PYARROW_AROUND_CARD if has_card(name) else {}
    return pads.dataset(out, format="parquet", **kw).to_table(columns=["id"]).column("id").to_pylist()


def read_duckdb(out: Path, name: str) -> list[str]:
    duckdb = pytest.importorskip("duckdb")  # test extras: without them only their readers skip
    return [r[0] for r in duckdb.sql(f"SELECT id FROM read_parquet('{shard_glob(out, name)}')").fetchall()]


def read_polars(out: Path, name: str) -> list[str]:
    pl = pytest.importorskip("polars")
    return pl.scan_parquet(shard_glob(out, name)).select("id").collect()["id"].to_list()


READERS = {"pq.read_table": read_pq_table, "pyarrow.dataset": read_pa_dataset, "duckdb": read_duckdb,
           "polars": read_polars}


@pytest.mark.parametrize("option_set", list(OPTION_SETS))
@pytest.mark.parametrize("reader", list(READERS))
def test_reader_reads_every_row(outputs, corpus, option_set, reader):
    out = outputs(option_set)
    rows, ids = expected(out, corpus)
    got = READERS[reader](out, option_set)
    assert len(got) == rows and Counter(got) == ids


@pytest.mark.parametrize("option_set", list(OPTION_SETS))
def test_datasets_with_data_files_reads_every_row(outputs, corpus, hf, tmp_path, option_set):
    out = outputs(option_set)
    rows, ids = expected(out, corpus)
    ds = hf.load_dataset("parquet", data_files=shard_glob(out, option_set), cache_dir=str(tmp_path / "cache"))
    assert set(ds) == {"train"}  # data_files without a split: every row in "train"
    assert ds["train"].num_rows == rows and Counter(ds["train"]["id"]) == ids


@pytest.mark.parametrize("option_set", [name for name in OPTION_SETS if has_card(name)])
def test_datasets_loads_the_card_with_train_and_validation(outputs, corpus, hf, tmp_path, option_set):
    out = outputs(option_set)
    rows, ids = expected(out, corpus)
    splits = {d.id: d.meta["split"] for d in read_shards(out)}
    cache = str(tmp_path / "cache")
    ds = hf.load_dataset(str(out), cache_dir=cache)
    if is_dirs(option_set):  # one config: both splits
        assert set(ds) == {"train", "validation"}
        train, val = ds["train"], ds["validation"]
    else:  # column layout: the default config holds train, the "validation" config validation
        assert set(ds) == {"train"}
        train, val = ds["train"], hf.load_dataset(str(out), "validation", cache_dir=cache)["validation"]
    assert train.num_rows + val.num_rows == rows and Counter(train["id"]) + Counter(val["id"]) == ids
    assert {splits[i] for i in train["id"]} == {"train"} and {splits[i] for i in val["id"]} == {"val"}
    assert val.num_rows == manifest(out)["splits"]["val"] > 0


@pytest.mark.parametrize("option_set", [name for name in OPTION_SETS if not has_card(name)])
def test_datasets_loads_the_folder_without_a_card(outputs, corpus, hf, tmp_path, option_set):
    """`load_dataset(OUT)` without a card: every row in "train" (the README says how to pick the validation
    rows), or, with --split-layout dirs, the splits taken from the folder names train/ and validation/."""
    out = outputs(option_set)
    rows, ids = expected(out, corpus)
    ds = hf.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    if is_dirs(option_set):
        assert set(ds) == {"train", "validation"}
        assert set(ds["train"]["split"]) == {"train"} and set(ds["validation"]["split"]) == {"val"}
    else:
        assert set(ds) == {"train"} and set(ds["train"]["split"]) == {"train", "val"}
    assert Counter(id_ for split in ds.values() for id_ in split["id"]) == ids


@pytest.mark.parametrize("option_set", [name for name in OPTION_SETS if has_card(name)])
def test_the_card_is_the_one_exception_and_only_pyarrow_folder_readers_need_help(outputs, option_set):
    """What the README documents: README.md is read as Parquet by pyarrow's folder readers, unless told to skip it."""
    out = outputs(option_set)
    with pytest.raises(pa.ArrowInvalid, match="README.md"):
        pq.read_table(out)
    with pytest.raises(pa.ArrowInvalid, match="README.md"):
        pads.dataset(out, format="parquet").to_table()
    assert pads.dataset(out, format="parquet", exclude_invalid_files=True).count_rows() == manifest(out)["rows"]


@pytest.mark.parametrize("option_set", list(OPTION_SETS))
def test_nothing_but_shards_and_the_card_is_visible_to_readers(outputs, option_set):
    """Every non-shard file is `_`/`.`-named (README.md aside), and only shards match the shard glob."""
    out = outputs(option_set)
    m = manifest(out)
    shards = {e["name"] for e in m["shards"]}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == shards | {f["name"] for f in m["files"]} | {"_MANIFEST.json"}
    others = on_disk - shards
    assert all(n == "README.md" or n.split("/")[0].startswith(("_", ".")) for n in others), others
    glob = "*/*.parquet" if is_dirs(option_set) else "*.parquet"
    assert {p.relative_to(out).as_posix() for p in out.glob(glob)} == shards
    assert ("README.md" in others) == has_card(option_set)
    # the manifest's ledger names a file OUT holds, or null when there is none
    assert m["ledger"] == ("_LEDGER.jsonl" if has_card(option_set) else None)
    assert m["ledger"] is None or m["ledger"] in others
    assert cli.main(["--verify", str(out)]) == 0
