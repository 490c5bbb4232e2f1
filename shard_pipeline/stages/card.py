"""The dataset card (``OUT/README.md``) and the input ledger for a training-ready output.

The card is a Hugging Face dataset README whose YAML makes ``datasets.load_dataset(OUT)`` return the right
splits; the ledger traces every row to its input file and license. Pure functions of their arguments (the
same output gives the same bytes); the prose is the packaged template ``card.md``, blocks named ``%% name``.

In the column layout both splits share the files, and ``data_files`` map whole files, so the ``default``
config reads them with the Parquet filter ``split == "train"`` and a ``validation`` config with
``split == "val"`` (``datasets`` >= 3.2; older ones refuse the option rather than mix the splits).
A split with no rows is left out of the configs (an empty glob is an error for ``datasets``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from shard_pipeline.contract.annotations import ANNOTATIONS_DIR, FIELDS_NAME
from shard_pipeline.contract.extras import BALANCE_NAME, CLEAN_POLICY_NAME, CLEANED_NAME
from shard_pipeline.contract.manifest import manifest_sets
from shard_pipeline.paths import CARD_TEMPLATE
from shard_pipeline.units import human_bytes

LEDGER_KEYS: tuple[str, ...] = ("source_id", "location", "bytes", "mtime", "documents", "license_spdx")
LAYOUTS = ("dirs", "column")
SHARD_GLOB = "shard-*.parquet"
# Hugging Face size_categories (huggingface_hub's DatasetCardData): the k-th is for fewer than 10**(k + 3) rows.
_SIZE_CATEGORIES = ("n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M", "100M<n<1B", "1B<n<10B",
                    "10B<n<100B", "100B<n<1T")
# Provenance keys the card knows; any other key is shown too, in the caller's order.
PROVENANCE_KEYS = ("license_spdx", "source", "selection", "tool", "tool_commit", "language", "pretty_name", "repo_id")


# ---------------------------------------------------------------- ledger


def _check_count(where: str, key: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {key} must be a non-negative int{' or None' if optional else ''}, got {value!r}")


def ledger_rows(inputs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One ledger row per input shard, in input order, with exactly ``LEDGER_KEYS`` in that order; ``bytes``
    and ``mtime`` are None over HTTP; ``license_spdx`` must be non-empty (the ledger exists to trace it)."""
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
    for k, name in enumerate(_SIZE_CATEGORIES):
        if rows < 10 ** (k + 3):
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


def _template_blocks(text: str) -> dict[str, str]:
    """The template's blocks: a line ``%% name`` starts block ``name``, which runs to the next such line."""
    parts = re.split(r"^%% (.*)\n", text, flags=re.M)
    return {name: body.removesuffix("\n") for name, body in zip(parts[1::2], parts[2::2])}


_BLOCKS = _template_blocks(CARD_TEMPLATE.read_text(encoding="utf-8"))


def _fill(block: str, values: Mapping[str, Any]) -> str:
    return _BLOCKS[block].format_map(values)


def _values(f: _CardFacts, provenance: Mapping[str, Any], config_sha256: str, ledger_name: str) -> dict[str, Any]:
    """What the template's blocks name, besides the facts themselves."""
    return {
        **vars(f), "text_human": human_bytes(f.text_bytes), "train_share": _pct(f.train, f.rows),
        "val_share": _pct(f.val, f.rows), "val_percent": f.val_permille / 10, "glob": SHARD_GLOB,
        "read_glob": "**/" + SHARD_GLOB if f.layout == "dirs" else SHARD_GLOB,
        "minhash_note": " (row indexes count within the split's own shard set)" if f.layout == "dirs" else "",
        "trained_folder": "train/ " if f.layout == "dirs" else "", "join_folder": "train/" if f.layout == "dirs" else "",
        "annotations_dir": ANNOTATIONS_DIR, "fields_name": FIELDS_NAME, "balance_name": BALANCE_NAME,
        "cleaned_name": CLEANED_NAME, "clean_policy_name": CLEAN_POLICY_NAME, "source_cell": _cell(f.source),
        "selection_cell": _cell(provenance.get("selection")), "spdx_cell": _cell(f.spdx), "config_sha256": config_sha256,
        "tool_cell": _cell(provenance.get("tool") or "hplt-shard"),
        "tool_commit_cell": _cell(provenance.get("tool_commit") or "unknown"), "ledger_cell": _cell(ledger_name),
        "ledger_keys": ", ".join(f"`{k}`" for k in LEDGER_KEYS), "repo": _q(f.repo),
    }


def _annotations_lines(report: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """Where the annotation files are, their fields, how to join them to the shards ranks read."""
    rows = [f"| `{f['column']}` | {f['type']} | {f['null_rows']:,} |" for f in report["fields"]]
    return [_fill("annotations", values), *rows, _fill("annotations end", values)]


def _cleaning_lines(policy: Mapping[str, Any], rows: int, values: Mapping[str, Any]) -> list[str]:
    thresholds = policy.get("thresholds", {})
    quarantined = int(policy.get("quarantined", 0))
    reasons = policy.get("reasons", {})
    values = {**values, "quarantined": quarantined, "quarantined_share": _pct(quarantined, rows + quarantined, ".3g"),
              "thresholds_json": json.dumps(dict(thresholds), indent=2, ensure_ascii=False)}
    b = [_fill("cleaning", values), *(f"- {line}" for line in _rule_lines(thresholds)), _fill("cleaning end", values)]
    if reasons:
        b += [_BLOCKS["reasons"]] + [f"| `{r}` | {int(c):,} |" for r, c in reasons.items()]
    if thresholds:
        b.append(_fill("thresholds", values))
    return b


def _rule_lines(thresholds: Mapping[str, Any]) -> list[str]:
    """One line per quarantine rule with its thresholds; only the rule's name when they are not all there."""
    values = dict(thresholds)
    values.update({f"{k}_pct": f"{100 * v:g}%" for k, v in thresholds.items() if isinstance(v, float)})
    out = []
    for template in _BLOCKS["rules"].split("\n"):
        try:
            out.append(template.format(**values))
        except (KeyError, ValueError):
            out.append(template.split(": ", 1)[0])
    return out


def _balance_lines(f: _CardFacts, values: Mapping[str, Any]) -> list[str]:
    rows = [f"| {ranks} | {int(entry['shards_per_rank']):,} | {100 * float(entry['max_relative_load_deviation']):.4f}% |"
            for ranks, entry in f.balance.items()]
    return [_fill("balance", values), *rows, _fill("balance end", values)]


def _provenance_lines(f: _CardFacts, provenance: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    b = [_fill("provenance", values)] + ([_fill("selection", values)] if provenance.get("selection") else [])
    b.append(_fill("provenance rest", values))
    return b + [f"| {_cell(key)} | {_cell(value)} |" for key, value in provenance.items() if key not in PROVENANCE_KEYS]


def _usage_lines(f: _CardFacts, values: Mapping[str, Any]) -> list[str]:
    snippet = f"usage {f.layout}" + (" validation" if f.val else "")
    return [_fill("usage", values), _fill(snippet, values), _fill("usage end", values)]


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

    ``manifest`` may carry ``balance`` (``balance.balance_report``); ``policy`` is ``clean.summary(...)`` or
    None without --clean; ``provenance`` needs ``license_spdx``, and its other keys (``source``,
    ``language``, ``repo_id``, ...) go to the front matter, the usage snippet or the provenance table.
    """
    f = _card_facts(manifest, layout, provenance)
    values = _values(f, provenance, manifest["config_sha256"], ledger_name)
    b = _front_matter(f, provenance, bool(policy)) + [_fill(name, values) for name in ("counts", "splits", f"files {layout}", "fields")]
    if annotations:  # --annotations: contract/annotations.fields_report
        b += _annotations_lines(annotations, values)
    if policy:
        b += _cleaning_lines(policy, f.rows, values)
    if f.balance:
        b += _balance_lines(f, values)
    b += _provenance_lines(f, provenance, values) + _usage_lines(f, values)
    return "\n".join(b) + "\n"
