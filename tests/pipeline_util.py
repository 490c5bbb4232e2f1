"""Helpers for end-to-end pipeline tests: make a corpus, run the CLI, compute the expected output.

The expected output is always `write_shards` (the in-memory contract writer) over the same
documents with the run's config hash: the pipeline must match it byte for byte.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np
import orjson

from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.rules import split_of
from shard_pipeline.contract.shard import write_shards
from shard_pipeline.input.corpus import find_shards
from shard_pipeline.input.counts_index import CountRow, read_index
from shard_pipeline.input.reader import ReadStats, iter_records, to_doc
from shard_pipeline.input.synth import generate_corpus, make_record, write_jsonl_zst
from shard_pipeline.stages.balance import _sizes, cut_targets, cuts_from_raw
from shard_pipeline.submit import cli

LANG = "eng_Latn"
LICENSE = "CC0-1.0"


def as_from_a_terminal() -> None:
    """`preexec_fn` for a child a test sends Ctrl-C (SIGINT) to: the dispositions a terminal's foreground
    job starts with, whatever the test session inherited (a background job of a script ignores SIGINT,
    and an ignored signal stays ignored across exec)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def compiled(fn, module: str):
    """`fn` from a compiled module (setup.py); a test of it fails where a C compiler could have built
    it (`pip install -e .` was not run since a change) and is skipped only where none is installed."""
    import pytest

    if fn is None:
        if shutil.which("cc") or shutil.which("gcc"):
            pytest.fail(f"a C compiler is here but {module} is not built: run `pip install -e .`")
        pytest.skip(f"no C compiler: {module} is not built and its Python path is used")
    return fn


def make_corpus(root: Path, *, n_docs: int = 240, names: Sequence[str] = ("10_1.cc", "9_1.ia", "9_2.cc", "8_1.ab"),
                id_style: str = "hex", seed: int = 1, text_bytes: int = 600, frames: int = 1) -> Path:
    """A v4 `clean`-shaped corpus root holding LANG/."""
    clean = root / "clean"
    generate_corpus(clean, LANG, corpus="v4", n_docs=n_docs, shard_names=list(names), seed=seed,
                    text_bytes=text_bytes, id_style=id_style, frames=frames)
    return clean


def index_file(index: Path, root: Path, lang: str = LANG, corpus: str = "v4") -> Path:
    """Where a run over `root` keeps its counts-index rows: a tmp root is no preset's HPLT root (input/identity.py)."""
    from shard_pipeline.input.identity import index_key

    return index.joinpath(*index_key(corpus, root, {}), f"{lang}.tsv")


def write_records(path: Path, records: Sequence[dict | bytes], frames: int = 1) -> None:
    write_jsonl_zst(path, [r if isinstance(r, bytes) else orjson.dumps(r) for r in records], frames=frames)


def records(n: int, seed: int = 0, **kw) -> list[dict]:
    rng = random.Random(seed)
    return [make_record(i, rng, **kw) for i in range(n)]


def run_cli(root: Path, out: Path, run_dir: Path, *extra: str, corpus: str = "v4") -> int:
    argv = [LANG, "--corpus", corpus, "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
            "--executor", "local", "--license", LICENSE, "--jobs", "2", *extra]
    return cli.main(argv)


def expected_output(root: Path, out: Path, *, config_sha256: str, shard_rows: int, val_permille: int = 5,
                    row_group_bytes: int = 64 << 20, corpus: str = "v4", dataset: str | None = None,
                    filters: dict | None = None, split: str | None = None) -> dict:
    """write_shards over the corpus's documents (only those of `split`, if given: one set of a dirs layout)."""
    shards = find_shards(LANG, corpus=corpus, local_root=root)
    docs = []
    for shard in shards:
        for rec in iter_records(shard, corpus=corpus, stats=ReadStats()):
            docs.append(to_doc(rec, shard, LICENSE))
    if split is not None:
        docs = [d for d in docs if split_of(hashlib.sha256(d.text.encode()).digest(), val_permille) == split]
    return write_shards(docs, out, dataset=dataset or f"hplt-{corpus}-{root.name}-{LANG}", version="1",
                        shard_rows=shard_rows, val_permille=val_permille, row_group_bytes=row_group_bytes,
                        config_sha256=config_sha256, filters=filters, ledger_ref=None)  # a run without a card has no ledger


def tree_bytes(d: Path) -> dict[str, bytes]:
    """Every file under `d` by its path relative to `d` (folders of a dirs layout included)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def lang_dir(run_dir: Path, lang: str = LANG) -> Path:
    """The run dir of `lang` in the run RUN_DIR: RUN_DIR/<LANG> (config.json, receipts, DONE, its logs)."""
    return Path(run_dir) / lang


def config_sha(run_dir: Path, lang: str = LANG) -> str:
    """The config sha256 of `lang` in the run RUN_DIR (or of the language's run dir RUN_DIR/<LANG> itself)."""
    d = Path(run_dir) if (Path(run_dir) / "config.json").exists() else lang_dir(run_dir, lang)
    return json.loads((d / "config.json").read_text())["config_sha256"]


def manifest(out: Path) -> dict:
    return json.loads((out / MANIFEST_NAME).read_text())


def read_rows(root: Path, corpus: str, subset: str, lang: str) -> dict[str, CountRow]:
    """The rows of one counts-index file that can be true (`read_index`)."""
    return read_index(root, corpus, subset, lang).rows


def byte_balanced_cuts(text_bytes: "np.ndarray", n_shards: int) -> list[tuple[int, int]]:
    """stages/balance.py's cut rule over all rows in memory: ``n_shards`` contiguous row ranges [start, stop),
    balanced by text bytes (the form the plan's streaming cuts are held to)."""
    sizes = _sizes(text_bytes)
    c = np.cumsum(sizes)
    targets = np.asarray(cut_targets(int(c[-1]) if c.size else 0, n_shards), dtype=np.int64)
    return cuts_from_raw(np.searchsorted(c, targets, side="left") + 1, int(sizes.size))


def cut_in_block(cumsum_before: int, block_text_bytes: "np.ndarray", target: int) -> int | None:
    """stages/balance.cuts_in_block for one target, written out on its own."""
    sizes = _sizes(block_text_bytes)
    before, target = int(cumsum_before), int(target)
    if target <= before or sizes.size == 0:
        return None
    local = np.cumsum(sizes)
    if before + int(local[-1]) < target:
        return None
    return int(np.searchsorted(local, target - before, side="left")) + 1


def view_of(root: Path):
    """The view of the run in `root` (a run's RUNDIR, or one language's run dir)."""
    from shard_pipeline.run import unit_table
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.run.view import languages_view, run_view

    return languages_view(root) if unit_table.is_run_root(root) else run_view(RunDir(root))


def failures_by_kind(view) -> dict:
    """A view's failed tasks' outcome records, by their error kind."""
    found: dict = {}
    for o in view.failures:
        found.setdefault(o.kind, []).append(o)
    return found
