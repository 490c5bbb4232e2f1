"""The dataset card (``OUT/README.md``) and the input ledger for a training-ready output.

A folder of shards is only usable by others if it says what it is: the card is a Hugging Face
dataset README whose YAML front matter makes ``datasets.load_dataset(OUT)`` return the right
splits, and whose body states the counts, the split rule, the cleaning policy, the balance for
data-parallel ranks, the provenance and a content notice. The ledger lists every input shard so
every row can be traced to the file it came from and the license it was packaged under.

Everything here is a pure function of its arguments: no timestamps, host names or paths unless
the caller passes them (the same output gives byte-identical files).

Layouts (``layout=``):

* ``"dirs"``: ``OUT/train/shard-*.parquet`` and ``OUT/validation/shard-*.parquet``; the
  ``default`` config maps split ``train`` and split ``validation`` to the two folders.
* ``"column"``: all shards at ``OUT/shard-*.parquet``, each holding both splits, told apart by
  the ``split`` column (``"train"``/``"val"``). Hugging Face ``data_files`` map whole files to
  splits, so one config cannot hold both. The ``default`` config therefore reads the files with
  the Parquet filter ``split == "train"`` (so ``load_dataset(OUT)["train"]`` never contains a
  validation row), and a second config ``validation`` reads them with ``split == "val"``. The
  filter is a ``datasets`` Parquet option since 3.2; an older ``datasets`` refuses the unknown
  option instead of silently mixing the splits.

A split with no rows is left out of the configs (an empty glob is an error for ``datasets``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from shard_pipeline.contract.extras import BALANCE_NAME, CLEAN_POLICY_NAME, CLEANED_NAME
from shard_pipeline.contract.manifest import manifest_sets
from shard_pipeline.units import human_bytes

LEDGER_KEYS: tuple[str, ...] = ("source_id", "location", "bytes", "mtime", "documents", "license_spdx")
LAYOUTS = ("dirs", "column")
SHARD_GLOB = "shard-*.parquet"
# Hugging Face size_categories (huggingface_hub's DatasetCardData), by total rows.
_SIZE_CATEGORIES = (
    (10**3, "n<1K"),
    (10**4, "1K<n<10K"),
    (10**5, "10K<n<100K"),
    (10**6, "100K<n<1M"),
    (10**7, "1M<n<10M"),
    (10**8, "10M<n<100M"),
    (10**9, "100M<n<1B"),
    (10**10, "1B<n<10B"),
    (10**11, "10B<n<100B"),
    (10**12, "100B<n<1T"),
)
# Provenance keys the card knows; any other key is shown too, in the caller's order.
PROVENANCE_KEYS = ("license_spdx", "source", "selection", "tool", "tool_commit", "language", "pretty_name", "repo_id")

_FIELDS = (
    ("id", "string", "document id from the source corpus; rows are sorted by it (UTF-8 byte order)"),
    ("text", "string", "the document text, never rewritten"),
    ("source_id", "string", "the input shard the row came from (see the ledger)"),
    ("url", "string", "the page the text was extracted from"),
    ("license_spdx", "string", "SPDX id of the license the row is packaged under"),
    ("lang", "string", "language code (`und` if unknown)"),
    ("n_chars", "int32", "length of `text` in Unicode code points"),
    ("sha256", "binary(32)", "SHA-256 of the UTF-8 text; decides the split"),
    ("minhash_cluster", "int64", "smallest row index of the row's near-duplicate cluster"),
    ("pii_redactions", "int32", "number of PII spans (e-mail addresses, IP addresses, phone numbers) HPLT's annotator "
     "found in the text; HPLT marks them and does not redact them, so they are still in `text`"),
    ("split", "string", '`"train"` or `"val"`'),
)


# ---------------------------------------------------------------- ledger


def _check_count(where: str, key: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {key} must be a non-negative int{' or None' if optional else ''}, got {value!r}")


def ledger_rows(inputs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One ledger row per input shard, in input order, with exactly ``LEDGER_KEYS`` in that order.

    ``bytes`` and ``mtime`` may be None (a shard read over HTTP has no stat); ``documents`` is the
    number of records read from the shard; ``license_spdx`` must be non-empty (the ledger exists
    so that every row can be traced to a license).
    """
    rows = []
    for i, inp in enumerate(inputs):
        where = f"ledger input {i}"
        missing = [k for k in LEDGER_KEYS if k not in inp]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        for key in ("source_id", "location", "license_spdx"):
            if not isinstance(inp[key], str):
                raise ValueError(f"{where}: {key} must be a str, got {inp[key]!r}")
        if not inp["license_spdx"] or not inp["location"]:
            raise ValueError(f"{where}: location and license_spdx must be non-empty")
        _check_count(where, "bytes", inp["bytes"], optional=True)
        _check_count(where, "mtime", inp["mtime"], optional=True)
        _check_count(where, "documents", inp["documents"], optional=False)
        rows.append({k: inp[k] for k in LEDGER_KEYS})
    return rows


def ledger_bytes(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """JSON Lines: one compact object per row, keys in ``LEDGER_KEYS`` order, UTF-8, each line
    ending in ``\\n`` (``b""`` for no rows). Deterministic: same rows, same bytes."""
    out = []
    for i, row in enumerate(rows):
        if set(row) != set(LEDGER_KEYS):
            raise ValueError(f"ledger row {i}: keys must be exactly {', '.join(LEDGER_KEYS)}")
        out.append(json.dumps({k: row[k] for k in LEDGER_KEYS}, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------- card


def size_category(rows: int) -> str:
    """Hugging Face ``size_categories`` value for a row count: ``n<1K``, ``1K<n<10K``, ... ``n>1T``."""
    for limit, name in _SIZE_CATEGORIES:
        if rows < limit:
            return name
    return "n>1T"


def hf_license(spdx: str) -> str:
    """The Hub's license id: the SPDX id lowercased (``CC0-1.0`` -> ``cc0-1.0``); ``other`` for
    ``LicenseRef-*`` ids, which the Hub does not list."""
    return "other" if spdx.startswith("LicenseRef-") else spdx.lower()


def _q(value: str) -> str:
    """A YAML double-quoted scalar (a JSON string is one)."""
    return json.dumps(value, ensure_ascii=False)


def _configs_yaml(layout: str, has_train: bool, has_val: bool) -> list[str]:
    """`configs` for datasets: a split with no rows is left out (datasets refuses a split without data)."""
    splits = [s for s, has in (("train", has_train), ("validation", has_val)) if has] or ["train"]
    if layout == "dirs":
        lines = ["configs:", "- config_name: default", "  data_files:"]
        for s in splits:
            lines += [f"  - split: {s}", f"    path: {_q(s + '/' + SHARD_GLOB)}"]
        return lines
    configs = [("default", splits[0])] + [("validation", "validation") for _ in splits[1:]]
    lines = ["configs:"]
    for name, s in configs:
        value = "val" if s == "validation" else "train"
        lines += [f"- config_name: {name}", "  data_files:", f"  - split: {s}", f"    path: {_q(SHARD_GLOB)}",
                  f'  filters: [["split", "==", "{value}"]]']
    return lines


def _n(x: int) -> str:
    return f"{x:,}"


def _pct(part: int, whole: int, spec: str = ".2f") -> str:
    """A share in percent; ``.3g`` keeps a small one such as 0.000457% readable."""
    return f"{100 * part / whole:{spec}}%" if whole else "-"


def _cell(value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True)
class _CardFacts:
    """What the card says, read once from the manifest and the provenance."""

    layout: str
    spdx: str
    rows: int
    train: int
    val: int
    text_bytes: int
    shards: int
    trained: int  # shards ranks read: the only set, or train/
    stored: int
    val_permille: int
    dataset: str
    version: str
    balance: Mapping[str, Any]
    pretty: str
    source: Any
    repo: str


def _card_facts(manifest: Mapping[str, Any], layout: str, provenance: Mapping[str, Any]) -> _CardFacts:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    spdx = provenance.get("license_spdx")
    if not isinstance(spdx, str) or not spdx:
        raise ValueError("provenance['license_spdx'] is required: a card without a license is unusable")
    dataset, version = str(manifest["dataset"]), str(manifest["version"])
    return _CardFacts(
        layout=layout, spdx=spdx, rows=int(manifest["rows"]),
        train=int(manifest["splits"]["train"]), val=int(manifest["splits"]["val"]),
        text_bytes=int(manifest["text_bytes"]), shards=len(manifest["shards"]),
        trained=len(manifest_sets(manifest)[0][2]), stored=sum(int(s["bytes"]) for s in manifest["shards"]),
        val_permille=int(manifest["params"]["val_permille"]), dataset=dataset, version=version,
        balance=manifest.get("balance") or {}, pretty=str(provenance.get("pretty_name") or f"{dataset} {version}"),
        source=provenance.get("source") or dataset, repo=str(provenance.get("repo_id") or "path/to/this/dataset"),
    )


def _front_matter(f: _CardFacts, provenance: Mapping[str, Any], cleaned: bool) -> list[str]:
    fm = ["---", f"pretty_name: {_q(f.pretty)}", f"license: {_q(hf_license(f.spdx))}"]
    if hf_license(f.spdx) == "other":
        fm.append(f"license_name: {_q(f.spdx.lower())}")
    if provenance.get("language"):
        fm += ["language:"] + [f"- {_q(str(code))}" for code in provenance["language"]]
    fm += ["task_categories:", "- text-generation", "size_categories:", f"- {_q(size_category(f.rows))}"]
    tags = ["pretraining", "parquet", "web"] + (["cleaned"] if cleaned else []) + (["distributed-training"] if f.balance else [])
    fm += ["tags:"] + [f"- {t}" for t in tags]
    return fm + _configs_yaml(f.layout, f.rows - f.val > 0, f.val > 0) + ["---"]


def _counts_lines(f: _CardFacts) -> list[str]:
    return [
        f"# {f.pretty}", "",
        f"{f.dataset} {f.version}: {_n(f.rows)} documents ({human_bytes(f.text_bytes)} of UTF-8 text) from {f.source}, "
        f"packaged by hplt-shard as {_n(f.shards)} deterministic Parquet shards (zstd, rows sorted by `id`). "
        "Every file is listed with its SHA-256 in `_MANIFEST.json`; the same inputs and configuration "
        "give byte-identical files.",
        "", "## Counts", "", "| | rows | share |", "|---|---:|---:|",
        f"| train | {_n(f.train)} | {_pct(f.train, f.rows)} |",
        f"| validation | {_n(f.val)} | {_pct(f.val, f.rows)} |",
        f"| total | {_n(f.rows)} | |",
        "", "| | |", "|---|---:|",
        f"| text (UTF-8 bytes) | {_n(f.text_bytes)} |",
        f"| shards | {_n(f.shards)} |",
        f"| stored (Parquet bytes) | {_n(f.stored)} |",
    ]


_FILES_DIRS = (f"Files: `train/{SHARD_GLOB}` (split `train`) and `validation/{SHARD_GLOB}` (split `validation`); "
               'the `split` column repeats it (`"train"` / `"val"`).')
_FILES_COLUMN = (f'Every shard (`{SHARD_GLOB}`) holds rows of both splits; the `split` column (`"train"` / `"val"`) '
                 "tells them apart. The `default` config reads only the train rows and the `validation` config "
                 "only the validation rows, through a Parquet filter on `split` (`datasets` >= 3.2). "
                 "Any other reader must filter too, e.g. `WHERE split = 'train'`.")


def _splits_lines(f: _CardFacts) -> list[str]:
    b = ["", "## Splits", "",
         "A document is in validation when the first 8 bytes of the SHA-256 of its UTF-8 text, read as a "
         f"big-endian unsigned integer, modulo 1000 are below {f.val_permille} ({f.val_permille / 10:g}%); "
         "otherwise it is in train. The split depends on the text alone: exact copies never straddle "
         "train and validation, and a document's split does not change when others are added or removed.",
         "", _FILES_DIRS if f.layout == "dirs" else _FILES_COLUMN]
    b += ["", "## Data fields", "", "| column | type | meaning |", "|---|---|---|"]
    for name, typ, meaning in _FIELDS:
        if name == "minhash_cluster" and f.layout == "dirs":
            meaning += " (row indexes count within the split's own shard set)"
        b.append(f"| `{name}` | {typ} | {meaning} |")
    return b


def _cleaning_lines(policy: Mapping[str, Any], rows: int) -> list[str]:
    thresholds = policy.get("thresholds", {})
    quarantined = int(policy.get("quarantined", 0))
    reasons = policy.get("reasons", {})
    b = ["", "## Cleaning", "",
         f"The quarantine policy set aside {_n(quarantined)} documents ({_pct(quarantined, rows + quarantined, '.3g')} "
         "of kept + quarantined). Quarantined documents are not in this dataset. A document was quarantined "
         "when it matched one or more of:", ""]
    b += [f"- {line}" for line in _rule_lines(thresholds)]
    b += ["",
          "Reason counts can add up to more than the total: one document can match several rules. "
          "No kept document was rewritten; cleaning only selects whole documents. The quarantined documents "
          f"are kept whole, with their reasons, in `{CLEANED_NAME}`; thresholds and counts are in `{CLEAN_POLICY_NAME}`."]
    if reasons:
        b += ["", "| reason | documents |", "|---|---:|"] + [f"| `{r}` | {_n(int(c))} |" for r, c in reasons.items()]
    if thresholds:
        b += ["", "Thresholds:", "", "```json", json.dumps(dict(thresholds), indent=2, ensure_ascii=False), "```"]
    return b


def _balance_lines(f: _CardFacts) -> list[str]:
    b = ["", "## Balance for data-parallel training", "",
         f"The {_n(f.trained)} {'train/ ' if f.layout == 'dirs' else ''}shards are cut by cumulative text bytes, and their count divides evenly by each "
         "data-parallel rank count below. A loader that gives each rank an equal, contiguous run of shard "
         "files in name order gets this balance:",
         "", "| data ranks | shards per rank | maximum relative load deviation |", "|---:|---:|---:|"]
    for ranks, entry in f.balance.items():
        dev = float(entry["max_relative_load_deviation"])
        b.append(f"| {ranks} | {_n(int(entry['shards_per_rank']))} | {100 * dev:.4f}% |")
    return b + ["", f"Load = text bytes of a rank's shards; deviation = max |load - mean| / mean (also in `{BALANCE_NAME}`)."]


def _provenance_lines(f: _CardFacts, provenance: Mapping[str, Any], config_sha256: str, ledger_name: str) -> list[str]:
    b = ["", "## Provenance", "", "| | |", "|---|---|", f"| source | {_cell(f.source)} |"]
    if provenance.get("selection"):
        b.append(f"| selection | {_cell(provenance['selection'])} |")
    b += [
        f"| license | {_cell(f.spdx)} |",
        f"| config sha256 | `{config_sha256}` |",
        f"| tool | {_cell(provenance.get('tool') or 'hplt-shard')} |",
        f"| tool commit | {_cell(provenance.get('tool_commit') or 'unknown')} |",
        f"| input ledger | `{_cell(ledger_name)}`: one JSON line per input shard ({', '.join(f'`{k}`' for k in LEDGER_KEYS)}) |",
        "| manifest | `_MANIFEST.json`: every file's SHA-256, rows and bytes; split and drop counts |",
    ]
    return b + [f"| {_cell(key)} | {_cell(value)} |" for key, value in provenance.items() if key not in PROVENANCE_KEYS]


def _usage_lines(f: _CardFacts) -> list[str]:
    b = ["", "## Usage", "", "```python", "from datasets import load_dataset", ""]
    if f.layout == "dirs":
        b.append(f'ds = load_dataset({_q(f.repo)})  # splits: train' + (", validation" if f.val else ""))
        b.append('train = ds["train"]')
        if f.val:
            b.append('validation = ds["validation"]')
    else:
        b.append(f'train = load_dataset({_q(f.repo)})["train"]  # train rows only')
        if f.val:
            b.append(f'validation = load_dataset({_q(f.repo)}, "validation")["validation"]')
    glob = "**/" + SHARD_GLOB if f.layout == "dirs" else SHARD_GLOB
    return b + ["```", "", "Or with DuckDB:", "", "```sql",
                f"SELECT split, count(*) FROM read_parquet('{glob}') GROUP BY split;", "```", "", *_READING_NOTES]


_READING_NOTES = (
    "Large streaming jobs should list the files in name order (or from `_MANIFEST.json`) "
    "rather than rely on an object store's listing order.",
    "",
    "Every file other than the shards is named `_*` (or lies under a `_*` folder), which Arrow, Spark and Hadoop "
    "skip, except this `README.md`: pyarrow would try to read it as Parquet, so open the folder with "
    "`pyarrow.parquet.read_table(path, ignore_prefixes=[\".\", \"_\", \"README\"])` "
    "(the same option for `pyarrow.dataset.dataset`), or read the shard glob above.",
    "",
    "## Content notice",
    "",
    "This is text collected from the public web. Automated filtering does not replace review for "
    "safety, privacy, licensing or fitness for a particular domain; apply the controls your use "
    "case needs. Personal data is not redacted: `pii_redactions` counts the spans HPLT's annotator "
    "found, and they remain in the text.",
)


def dataset_card(
    manifest: Mapping[str, Any],
    *,
    layout: str,
    ledger_name: str,
    policy: Mapping[str, Any] | None,
    provenance: Mapping[str, Any],
    annotations: Mapping[str, Any] | None = None,
) -> str:
    """``OUT/README.md``: YAML front matter for the Hub and ``datasets``, then the card body.

    ``manifest``: the output's manifest (``dataset``, ``version``, ``config_sha256``, ``rows``,
    ``text_bytes``, ``splits``, ``params.val_permille``, ``shards[].bytes``), plus optionally
    ``balance`` (``balance.balance_report``). ``policy``: ``clean.summary(...)`` (``thresholds``,
    ``quarantined``, ``reasons``) or None when ``--clean`` was off. ``provenance``: at least
    ``license_spdx``; optionally ``source``, ``selection``, ``tool``, ``tool_commit``,
    ``language`` (list of codes for the front matter), ``pretty_name``, ``repo_id`` (used in the
    usage snippet), and any other key, shown in the provenance table in the given order.
    """
    f = _card_facts(manifest, layout, provenance)
    b = _front_matter(f, provenance, bool(policy)) + _counts_lines(f) + _splits_lines(f)
    if annotations:  # --annotations: contract/annotations.fields_report
        from shard_pipeline.contract.annotations import card_lines

        b += card_lines(dict(annotations), "train/" if layout == "dirs" else "")
    if policy:
        b += _cleaning_lines(policy, f.rows)
    if f.balance:
        b += _balance_lines(f)
    b += _provenance_lines(f, provenance, manifest["config_sha256"], ledger_name) + _usage_lines(f)
    return "\n".join(b) + "\n"


_RULE_TEXT = (
    ("max_bytes", "larger than {max_bytes:,} UTF-8 bytes"),
    ("repeated_lines", "at least {repeated_lines_min_lines:,} non-empty lines of which at most {repeated_lines_max_unique_ratio_pct} are distinct"),
    ("one_line", "at least {one_line_min_bytes:,} bytes with at least {one_line_share_pct} of them in one line"),
    ("control_chars", "more than {control_char_ratio_pct} control characters (other than tab, newline, carriage return)"),
    ("char_run", "one character repeated more than {max_char_run:,} times in a row"),
    ("replacement_chars", "at least {replacement_min_chars:,} U+FFFD replacement characters, more than {replacement_ratio_pct} of the text"),
    ("whitespace_padding", "at least {whitespace_min_chars:,} characters, more than {whitespace_ratio_pct} whitespace and less than {alnum_ratio_below_pct} letters and digits"),
    ("base64_blob", "a run of at least {base64_min_run:,} characters from `[A-Za-z0-9+/=]` (an encoded blob)"),
)


def _rule_lines(thresholds: Mapping[str, Any]) -> list[str]:
    values = dict(thresholds)
    values.update({f"{k}_pct": f"{100 * v:g}%" for k, v in thresholds.items() if isinstance(v, float)})
    out = []
    for reason, template in _RULE_TEXT:
        try:
            out.append(f"`{reason}`: " + template.format(**values))
        except (KeyError, ValueError):
            out.append(f"`{reason}`")
    return out
