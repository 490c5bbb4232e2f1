"""Finalize: check every receipt against the plan and the disk, write the manifest, swap OUT.

Nothing reaches OUT unless every planned shard is in OUT.tmp as its writer recorded it and OUT.tmp holds
nothing else; what the manifest says of each shard is read from the file itself.
"""
from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path
from typing import Any

from shard_pipeline.commands import resume_command
from shard_pipeline.contract import root_manifest
from shard_pipeline.contract.extras import (
    BALANCE_NAME,
    CARD_NAME,
    CLEAN_POLICY_NAME,
    CLEANED_NAME,
    LEDGER_NAME,
)
from shard_pipeline.contract.previous import counted, shown
from shard_pipeline.contract.manifest import MANIFEST_NAME, build_manifest, manifest_sets, write_manifest
from shard_pipeline.contract.replace import PARKED, TMP_MARKER, parking_dir_for, tmp_owner
from shard_pipeline.contract.swap import folder_identity, notice, remove_replaced, swap_into_place, unpark
from shard_pipeline.contract.rules import SPLIT_DIRS
from shard_pipeline.files import atomic_leftovers, file_sha256, out_json_bytes, write_bytes_atomic
from shard_pipeline.input.counts_index import CountRow, Merge, record
from shard_pipeline.input.identity import CorpusNames
from shard_pipeline.run.claim import release
from shard_pipeline.run.faults import fault_point
from shard_pipeline.run.receipts import InputReceipt, PartitionReceipt, Plan, SwapReceipt, Validation
from shard_pipeline.run.records import REDO_STEP, load_record, made_here, save_record
from shard_pipeline.run.registry import already_swapped, swap_receipt
from shard_pipeline.run.rulebook import Context, Moment, preflight
from shard_pipeline.run.resume import changed_inputs
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.run.rundir import RunDir, commit_words
from shard_pipeline.run.tasklog import log
from shard_pipeline.stages.collect import EXTRA_NAMES, FinalizeError, collect_shards
from shard_pipeline.run.run_json import read_run_json


class AfterSwapError(Exception):
    """A step after the swap failed: OUT already holds this run's output; --resume finishes the rest."""


def remove_own_leftovers(run: RunDir, tmp: Path) -> None:
    """Remove the temporary files of an earlier finalize of this run killed while it wrote the manifest or an
    extra file (`files.atomic_leftovers`): this one writes them again, and `collect_shards` would call them strays."""
    if tmp_owner(tmp) != str(run.root):
        return  # not this run's OUT.tmp: `collect_shards` names what is there, nothing is removed
    for name in (MANIFEST_NAME, *EXTRA_NAMES):
        for left in atomic_leftovers(tmp / name):
            left.unlink(missing_ok=True)
            log.info(f"finalize: removed {left}, left by an earlier finalize of this run stopped mid-write")


def partition_inputs(run: RunDir, cfg: RunConfig) -> list[InputReceipt]:
    """Every input's receipt, in partition task order (each receipt this run's: plan and the done rule checked them)."""
    made = made_here(cfg.content.sha256())
    return [inp for t in range(cfg.execution.partition_tasks)
            for inp in load_record(run.partition_receipt(t), PartitionReceipt, made, step=REDO_STEP).inputs]


def update_counts_index(cfg: RunConfig, run: RunDir) -> tuple[int, Merge]:
    """Record every input's exact document count (a full read) in the shared counts index.

    Only the index root itself may be made here, inside a folder that exists: a run never builds
    /projappl/<another project>/... A row that knows a file as larger stays unless --release-changed.
    """
    root = cfg.execution.counts_index
    if not root:
        return 0, Merge()
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for inp in partition_inputs(run, cfg):
        ref = cfg.content.inputs[inp.index]
        if ref.size is None or ref.mtime is None:
            continue
        rows.append(CountRow(Path(ref.location).name, ref.size, ref.mtime, inp.read, "hplt-shard-read", now))
    merged = record(Path(root), *cfg.index_key(), cfg.content.lang, rows, accept_smaller=cfg.execution.release_changed)
    for change in merged.replaced:  # HPLT releases are immutable: a row for another file state is a signal, said aloud
        print(f"finalize: counts index row replaced (the file differs from what was counted before): "
              f"{change.describe()}", flush=True)
    return len(rows), merged


def counts_index_step(cfg: RunConfig, run: RunDir) -> tuple[dict[str, Any], list[str]]:
    """The index update after the swap, as validation.json's fields and its warnings: the output is in place
    by then, so a failed write is a warning, never a failed run."""
    try:
        counted, merged = update_counts_index(cfg, run)
    except (OSError, ValueError) as exc:  # TimeoutError is an OSError
        where = getattr(exc, "filename", None)
        reason = f"{where}: {exc.strerror}" if getattr(exc, "strerror", None) and where else str(exc)
        warning = (f"the counts index {cfg.execution.counts_index} was not updated ({reason}); "
                   "the output is complete; a later run counts these inputs itself unless the index holds them already")
        print(f"finalize: warning: {warning}", flush=True)
        return {"counts_index_rows": 0, "counts_index_replaced": [], "counts_index_warning": warning}, []
    fields = {"counts_index_rows": counted, "counts_index_replaced": [c.describe() for c in merged.replaced]}
    return fields, [notice(w) for w in merged.warnings()]


def clear_left_previous(tmp: Path, out: Path, run: RunDir) -> tuple[str, ...]:
    """Delete what an attempt stopped right after its swap left: the version it replaced, at OUT.tmp
    (exchange) or OUT.replaced/previous (fallback), proven by the manifest sha256 swap.json recorded
    before the swap, or this run's own marked staging folder. Anything else is not ours: left, named.
    Returns the warnings given."""
    owner = str(run.root)
    if tmp.is_dir() and not tmp.is_symlink() and tmp_owner(tmp) == owner:
        shutil.rmtree(tmp)  # this run's staging folder: the marker proves it
    earlier = swap_receipt(run)
    previous = earlier.previous if earlier is not None else None
    notices = remove_replaced(tmp, out, previous)
    park = parking_dir_for(out)
    if park.is_dir() and not park.is_symlink() and tmp_owner(park) == owner:
        notices += remove_replaced(park / PARKED, out, previous)
        unpark(park)
    return notices


def run_finalize(run: RunDir) -> dict[str, Any]:
    cfg = load_config(run)
    plan = load_record(run.plan_json, Plan, made_here(cfg.content.sha256()), step=REDO_STEP)
    tmp, out = Path(plan.tmp_dir), Path(cfg.execution.out)
    manifest = already_swapped(run, cfg, plan, out)  # proven by stat: OUT holds this run's very files
    if manifest is None:
        manifest, notices = check_and_swap(run, cfg, plan, tmp, out)
    else:
        if tmp_owner(out) == str(run.root):
            (out / TMP_MARKER).unlink()  # stopped between the exchange and removing the marker
        notices = clear_left_previous(tmp, out, run)
    try:
        fault_point("finalize-after-swap")
        return finish(run, cfg, plan, manifest, out, notices)
    except Exception as exc:  # OUT is already the new output: say so
        raise AfterSwapError(f"{out} now holds this run's complete output (swapped in); a step after the swap "
                             f"failed: {type(exc).__name__}: {exc}; "
                             f"fix it, then {resume_command(run.root)} finishes the last steps") from exc


def finish(run: RunDir, cfg: RunConfig, plan: Plan, manifest: dict[str, Any], out: Path,
           notices: tuple[str, ...] = ()) -> dict[str, Any]:
    """The steps after the swap: counts index, validation.json (with the swap's warnings), DONE, the claim released."""
    from shard_pipeline.contract.annotations import null_notes

    c = cfg.content
    index, index_notes = counts_index_step(cfg, run)
    validation = Validation(
        out=str(out),
        conservation=plan.conservation,
        inputs=partition_inputs(run, cfg),
        shards=len(manifest["shards"]),
        rows=manifest["rows"],
        splits=manifest["splits"],
        receipts_match_disk=True,
        warnings=[*notices, *(notice(w) for w in rank_shortfalls(c.dp_ranks, manifest)), *index_notes,
                  *(notice(w) for w in (null_notes(out) if c.annotations else []))],
        **index,
    )
    save_record(run.validation_json, made_here(c.sha256()), validation)
    root_manifest.land(out)  # before DONE: a resume after a kill here records it again
    run.done_marker.write_text("ok\n")
    release(out, run.root)
    if not cfg.execution.keep_spill:
        remove_spill(run, cfg)
    return manifest


def remove_spill(run: RunDir, cfg: RunConfig) -> None:
    """The partition spill of a done run: the bulk of its run directory (about 1.6x the compressed input), which
    nothing reads once DONE exists (every task of a done run is done). Receipts, logs and quarantine stay."""
    for task in range(cfg.execution.partition_tasks):
        run.spill_file(task).unlink(missing_ok=True)


def check_and_swap(run: RunDir, cfg: RunConfig, plan: Plan, tmp: Path,
                   out: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    c = cfg.content
    changed = changed_inputs(run, cfg)
    if changed:  # the output would describe inputs that are no longer there as listed
        raise FinalizeError(f"{counted(len(changed), 'input shard')} changed after this run read "
                            f"{'it' if len(changed) == 1 else 'them'}: {shown(changed)}; {out} is as it was; "
                            f"restore the input and {resume_command(run.root)} (it redoes only finalize), or start a new "
                            "run to read the inputs as they are now")
    remove_own_leftovers(run, tmp)
    shards = collect_shards(run, cfg, plan)
    if sum(s.rows for s in shards) != plan.rows:
        raise FinalizeError(f"shards hold {sum(s.rows for s in shards)} rows, the plan {plan.rows}")
    def manifest_with(files: list[dict[str, Any]]) -> dict[str, Any]:
        return build_manifest(
            dataset=c.dataset,
            version=c.version,
            config_sha256=c.sha256(),
            shard_rows=c.shard_rows,
            val_permille=c.val_permille,
            row_group_bytes=c.row_group_bytes,
            shards=shards,
            filters=plan.filters,
            dedup=None,
            pii=plan.pii,
            ledger_ref=LEDGER_NAME if c.dataset_card else None,  # null: this output carries no ledger
            files=files,
            split_layout=c.split_layout,
        )

    manifest = manifest_with(write_extra_files(run, cfg, plan, tmp, manifest_with([])))
    write_manifest(tmp, manifest)
    preflight(Moment.FINALIZE, Context(out, run.root, cfg=cfg))
    previous = folder_identity(out)
    save_record(run.swap_receipt, made_here(c.sha256()), SwapReceipt(file_sha256(tmp / MANIFEST_NAME), previous))
    fault_point("finalize-before-swap")
    swapped = swap_into_place(tmp, out)
    if swapped.held is not None:
        print(f"finalize: replaced {out}, which held {swapped.held.summary()}", flush=True)
    return manifest, swapped.notices


def _listed(tmp: Path, path: Path) -> dict[str, Any]:
    return {"name": path.relative_to(tmp).as_posix(), "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)
    return path


def rank_balance(dp_ranks, shard_bytes: list[int]) -> dict[str, Any]:
    """For each rank count that divides the shard count, how evenly equal contiguous runs of shards load ranks."""
    from shard_pipeline.stages.balance import balance_report

    ranks = [r for r in dp_ranks if len(shard_bytes) % r == 0]
    return {"ranks": balance_report(shard_bytes, ranks) if ranks else {},
            "unbalanced_rank_counts": [r for r in dp_ranks if r not in ranks]}


def rank_shortfalls(dp_ranks, manifest: dict[str, Any]) -> list[str]:
    """--dp-ranks promises a shard count that is a multiple of their lcm; a set with fewer documents than the lcm
    cannot have one (a shard is never empty). Said after done and by --status, not only in balance.json."""
    from shard_pipeline.stages.balance import shard_multiple
    from shard_pipeline.units import plural

    m = shard_multiple(dp_ranks) if dp_ranks else 1
    said = []
    for folder, _, entries in manifest_sets(manifest):
        if m > 1 and len(entries) % m:
            rows = sum(e["rows"] for e in entries)
            uneven = [str(r) for r in dp_ranks if len(entries) % r]
            said.append(f"--dp-ranks {','.join(map(str, dp_ranks))}: {f'{folder}/' if folder else 'the output'} has "
                        f"{plural(len(entries), 'shard')}, not a multiple of {m:,} (their lcm): it holds only {plural(rows, 'document')} "
                        f"and a shard is never empty, so {', '.join(uneven)} ranks cannot take equal numbers of its "
                        f"shards (OUT/{BALANCE_NAME})")
    return said


def balance_of(content, manifest: dict[str, Any]) -> dict[str, Any]:
    """How evenly ranks that take equal contiguous runs of shards are loaded (text bytes), per shard set."""
    from shard_pipeline.stages.balance import shard_multiple

    head = {
        "cut": "byte-balanced",
        "shard_bytes": content.shard_bytes,
        "dp_ranks": list(content.dp_ranks),
        "shard_multiple": shard_multiple(content.dp_ranks) if content.dp_ranks else 1,
    }
    per_set = {folder: rank_balance(content.dp_ranks, [e["text_bytes"] for e in entries])
               for folder, _, entries in manifest_sets(manifest)}
    return {**head, **per_set[""]} if "" in per_set else {**head, "sets": per_set}


def tool_commit(run: RunDir) -> str | None:
    """The code commit run.json recorded at submission, marked when the tree had uncommitted changes."""
    try:
        return commit_words(read_run_json(run.run_json))
    except (OSError, ValueError):
        return None


def write_extra_files(run: RunDir, cfg: RunConfig, plan: Plan, tmp: Path,
                      manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """OUT's files besides the shards (balance, --clean quarantine and policy, card and ledger), for the manifest."""
    from shard_pipeline.stages import card
    from shard_pipeline.stages.clean_policy import CleanPolicy, summary
    from shard_pipeline.stages.clean_quarantine import write_cleaned

    c = cfg.content
    listed = []
    policy = None
    if c.byte_balanced:
        report = balance_of(c, manifest)
        listed.append(_listed(tmp, _write_bytes(tmp / BALANCE_NAME, out_json_bytes(report))))
        trained = report["sets"][SPLIT_DIRS["train"]] if "sets" in report else report
        manifest = {**manifest, "balance": trained["ranks"]}  # the card states the balance of what ranks train on
    if c.clean is not None:
        cons = plan.conservation
        policy = summary(CleanPolicy(**c.clean), cons.cleaned, cons.clean_reasons)
        listed.append(_listed(tmp, write_cleaned(run, cfg, tmp / CLEANED_NAME)))
        listed.append(_listed(tmp, _write_bytes(tmp / CLEAN_POLICY_NAME, out_json_bytes(policy))))
    kept = None
    if c.annotations:
        kept, files = annotation_files(tmp, c, [e["name"] for e in manifest["shards"]])
        listed += files
    if c.dataset_card:
        inputs = {i.index: i for i in partition_inputs(run, cfg)}
        rows = card.ledger_rows([{"source_id": ref.source_id, "location": ref.location, "bytes": ref.size,
                                  "mtime": ref.mtime, "documents": inputs[k].read, "license_spdx": c.license_spdx}
                                 for k, ref in enumerate(c.inputs)])
        listed.append(_listed(tmp, _write_bytes(tmp / LEDGER_NAME, card.ledger_bytes(rows))))
        provenance = {"license_spdx": c.license_spdx, "source": CorpusNames(c.corpus, c.subset, c.hplt).source(c.lang),
                      "selection": f"{len(c.inputs)} input shards", "tool": "hplt-shard",
                      "tool_commit": tool_commit(run), "language": [c.lang]}
        text = card.dataset_card(manifest, layout=c.split_layout, ledger_name=LEDGER_NAME, policy=policy, provenance=provenance,
                                 annotations=kept)
        listed.append(_listed(tmp, _write_bytes(tmp / CARD_NAME, text.encode("utf-8"))))
    return sorted(listed, key=lambda f: f["name"])


def annotation_files(tmp: Path, c, shard_names: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """--annotations: each shard's annotation file listed with its rows, and `__annotations/fields.json` (the fields,
    their types, the rows where each is null), which it returns too, for the card."""
    import pyarrow.parquet as pq

    from shard_pipeline.contract.annotations import FIELDS_NAME, annotation_name, fields_report, null_counts
    from shard_pipeline.input.annotations import schema_of

    listed, nulls, rows = [], dict.fromkeys(c.annotations, 0), 0
    for name in shard_names:
        path = tmp / annotation_name(name)
        n = pq.ParquetFile(path).metadata.num_rows
        rows += n
        for field, k in null_counts(path, c.annotations).items():
            nulls[field] += k
        listed.append({**_listed(tmp, path), "rows": n})
    report = fields_report(c.annotations, schema_of(c.annotations, c.corpus), rows, nulls)
    listed.append(_listed(tmp, _write_bytes(tmp / FIELDS_NAME, out_json_bytes(report))))
    return report, listed
