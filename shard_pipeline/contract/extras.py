"""The files an output holds besides its shards, named so that readers of OUT never take them for data.

Arrow, Spark and Hadoop skip names starting with ``_`` or ``.``; ``datasets.load_dataset(OUT)`` skips only
``.*`` and ``__*`` folders and picks its reader by the most common extension. The rules that follow from
this (``reader_problem``) and why: docs/formats/corpus-shard.md section 7a.
"""
from __future__ import annotations

from pathlib import PurePosixPath

CARD_NAME = "README.md"  # the Hub reads the dataset card from the root: the one exception
LEDGER_NAME = "_LEDGER.jsonl"  # --dataset-card: one JSON line per input shard
BALANCE_NAME = "__balance/balance.json"  # --dp-ranks / --shard-bytes: load per data-parallel rank count
CLEAN_POLICY_NAME = "__quarantine/clean/policy.json"  # --clean: thresholds and counts by reason
CLEANED_NAME = "__quarantine/clean/documents.parquet"  # --clean: the documents set aside, whole
ROOT_EXCEPTIONS = frozenset({CARD_NAME})
# The balance file's name in older outputs, which still verify.
OLD_BALANCE_NAME = "balance.json"


def reader_problem(name: str) -> str | None:
    """Why readers of OUT would take the non-shard file ``name`` (relative to OUT) for data; None if they would not."""
    parts = PurePosixPath(name).parts
    if name in ROOT_EXCEPTIONS:
        return None
    if len(parts) == 1 and name.endswith(".json") and not name.startswith("."):  # datasets skips hidden files
        return ("a JSON file at the root besides _MANIFEST.json: datasets.load_dataset(OUT) reads JSON instead of "
                "the shards when JSON files outnumber them (put it in a '__' folder)")
    if not parts or not parts[0].startswith(("_", ".")):
        return ("not a shard, yet its name does not start with '_' or '.': pyarrow, Spark and Hadoop "
                "read it as data (only README.md may stay at the root)")
    if name.endswith(".parquet") and len(parts) < 3:
        return ("a Parquet file that is not a shard must lie two folders deep (e.g. __quarantine/clean/x.parquet): "
                "the globs OUT/*.parquet and OUT/*/*.parquet would match it")
    if name.endswith(".parquet") and not parts[0].startswith(("__", ".")):
        return ("a Parquet file that is not a shard must lie under a '__' or '.' folder (e.g. __quarantine/): "
                "datasets.load_dataset(OUT) skips those, not '_' ones")
    return None


def ledger_problems(ledger: object, listed: set[str]) -> list[str]:
    """What is wrong with the manifest's ``ledger`` (null without --dataset-card, a file OUT lists, or a reference
    outside OUT) given the files OUT lists; [] when nothing is. A ``_``/``.`` name is OUT's own: OUT must hold it."""
    bad = []
    if ledger is not None and not isinstance(ledger, str):
        return [f"ledger must be a string or null, got {ledger!r}"]
    if isinstance(ledger, str) and ledger not in listed and ledger.startswith(("_", ".")):
        bad.append(f"ledger names {ledger!r}, which OUT does not hold (null says there is no ledger)")
    if LEDGER_NAME in listed and ledger != LEDGER_NAME:
        bad.append(f"OUT holds the ledger {LEDGER_NAME} but ledger is {ledger!r}")
    return bad
