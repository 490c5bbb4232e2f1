"""`./hplt-shard --publish OUT DEST`: upload a verified output to any rclone destination, never overwriting.

The order makes DEST's state readable from its files alone: `_SHA256SUMS` first (it names the output, so a
later run knows a partial upload there as its own), `_MANIFEST.json` last (without it DEST is incomplete).
OUT is held while it is published and never written; the run dir gets `_PUBLISHED.json` (mode 0600).
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shard_pipeline.commands import verify_command
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import TMP_MARKER
from shard_pipeline.errors import EXIT_FAILED, ExitCode, UserError
from shard_pipeline.files import file_sha256, json_bytes, write_bytes_atomic
from shard_pipeline.run.claim import held_for_publish
from shard_pipeline.run.rulebook import beside_out
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.submit.dest import is_local, lands_inside, local_targets, mask, resolved
from shard_pipeline.submit.rclone import Rclone, RcloneFailed
from shard_pipeline.submit.upload import SUMS_NAME, DestState, Entry, OutChanged, Output, check_sha256, names_file, upload
from shard_pipeline.submit.scope import runs_roots
from shard_pipeline.units import plural

PUBLISHED_NAME = "_PUBLISHED.json"
SHOWN_PROBLEMS = 10
RECORD_MODE = 0o600  # _PUBLISHED.json names DEST: not for other users to read


class PublishRefused(UserError):
    """OUT or DEST is not fit for publishing; nothing at DEST was changed."""


class OutputDoesNotVerify(PublishRefused):
    """OUT fails `--verify`: exit 1, as `--verify` itself does."""

    exit_code = EXIT_FAILED


class PublishFailed(UserError):
    """rclone or the remote failed midway; the message names the next step."""

    exit_code = EXIT_FAILED


def find_rclone(dest: str) -> Rclone:
    exe = shutil.which("rclone")
    if exe is None:
        raise PublishRefused("rclone is not on PATH: install it (Debian/Ubuntu: apt-get install rclone; "
                             "LUMI: module load lumio) and configure the remote (rclone config; LUMI: lumio-conf), "
                             "then run the same command again")
    return Rclone(exe, dest)


def publish_one(rclone: Rclone, out: Path, dest: str, run_dir: Path | None) -> int:
    """publish() after the checks of DEST: OUT held (run/claim.py) while it is verified, uploaded, checked, recorded."""
    with held_for_publish(out) as held:
        if not held and out.is_dir():
            print(f"note: {out.parent} is not writable, so OUT is not locked while it is published "
                  "(no run of yours can replace it there either)")
        output = verified_output(out)
        run = find_run_dir(out, output.manifest, run_dir)
        shown = mask(dest)
        print(f"verified {out}: {plural(output.manifest['rows'], 'row')} in "
              f"{plural(len(output.manifest['shards']), 'shard')}, {plural(len(output.body) + 1, 'file')}, "
              f"{output.size:,} bytes")
        try:
            state = dest_state(rclone, dest, output)
        except RcloneFailed as exc:
            raise PublishFailed(f"cannot reach {shown}: {exc}. Check the remote's name (rclone listremotes), its "
                                "configuration (rclone config; LUMI: module load lumio; lumio-conf) and the network, "
                                "then run the same command again; nothing was uploaded") from None
        if state.complete:
            return already_published(rclone, dest, output, state.present)
        try:
            verified_by = upload(rclone, dest, output, state)
            version = rclone.version()
        except RcloneFailed as exc:
            changed = exc.names if isinstance(exc, OutChanged) else changed_in_out(output)
            if changed:
                raise PublishFailed(
                    f"OUT changed while it was published: {plural(len(changed), 'file')} no longer as verified "
                    f"({', '.join(changed[:3])}); "
                    f"{shown} holds a partial upload (no {MANIFEST_NAME}) of OUT as it was. Check OUT "
                    f"({verify_command(out)}); to publish it as it is now, remove the partial upload "
                    f"(rclone purge DEST) and run the same command again") from None
            raise PublishFailed(f"upload to {shown} broke midway: {exc}. {shown} is incomplete (no {MANIFEST_NAME}); "
                                "check the remote and the network, then run the same command again (before OUT "
                                "changes): it finishes the upload") from None
        record = publication(output, shown, verified_by, version)
        print(f"published {out} to {shown} at {record['published_at']}: {plural(record['files'], 'file')} "
              f"({MANIFEST_NAME} last, {SUMS_NAME}), sha256 verified by {verified_by}")
        if run is None:
            print(f"record: not written: the run directory of {out} is unknown (its manifest does not name it "
                  f"and none under {' or '.join(map(str, runs_roots()))} wrote it); give --run-dir RUNDIR to record "
                  "it there")
            return ExitCode.OK
        try:
            print(f"record: {record_publication(run, record)}")
        except OSError as exc:  # the upload is done and checked; only the note about it failed
            print(f"record: not written to {run / PUBLISHED_NAME}: {exc}", file=sys.stderr)
        return ExitCode.OK


def refuse_dest_inside(rclone: Rclone, dest: str, out: Path, run_dir: Path | None) -> None:
    """Refuse a DEST that writes into OUT, OUT.tmp, OUT.replaced, a claim or lock file beside OUT, or a run dir,
    followed as rclone would (dest.local_targets)."""
    def config() -> dict:
        try:
            return rclone.config_dump()
        except (RcloneFailed, ValueError):
            return {}  # an unreadable config: the listing of DEST fails next, with rclone's reason

    targets = local_targets(dest, config)
    protected = {"OUT": out, **beside_out(out), **{f"the runs folder {r}": r for r in runs_roots()}}
    if run_dir is not None:
        protected["--run-dir"] = run_dir
    for target in targets:
        found = [(what, path.resolve()) for what, path in protected.items() if lands_inside(target, path)]
        for what, path in found or owner_folders(target):
            via = "" if is_local(dest) else f" (rclone writes it to the local folder {resolved(target)[-1]})"
            raise PublishRefused(f"DEST {mask(dest)} lies inside {what} {path}{via}: publishing there "
                                 "would write into what hplt-shard owns (an output holds only its manifest's "
                                 "files). Choose a destination outside it; nothing was uploaded")


def owner_folders(target: str) -> list[tuple[str, Path]]:
    """Existing folders at or above a local target that hplt-shard owns: another output (a manifest
    without the _SHA256SUMS of a published copy), an OUT.tmp (its marker), a run directory."""
    found = []
    for t in resolved(target):
        for folder in (t, *t.parents):
            if (folder / MANIFEST_NAME).is_file() and not (folder / SUMS_NAME).exists():
                found.append(("the hplt-shard output", folder))
            elif (folder / TMP_MARKER).exists():
                found.append(("the hplt-shard OUT.tmp", folder))
            elif RunDir(folder).run_json.is_file() and (RunDir(folder).config_json.is_file()
                                                         or RunDir(folder).languages_json.is_file()):
                found.append(("the run directory", folder))  # RUNDIR or a language's RUNDIR/<LANG>
    return found


def already_published(rclone: Rclone, dest: str, output: Output, present: dict[str, int]) -> int:
    """DEST holds this output complete: check every file there; a success when all match (exit 0)."""
    shown = mask(dest)
    entries = (*output.body, output.manifest_entry)
    bad = [e for e in entries if present.get(e.name) != e.size]  # missing or cut short: no hash needed
    try:
        with tempfile.TemporaryDirectory(prefix="hplt-publish-") as tmp:
            to_check = [e for e in entries if e not in bad]
            wrong, how = check_sha256(rclone, dest, to_check, Path(tmp)) if to_check else ([], "size")
    except RcloneFailed as exc:
        raise PublishFailed(f"cannot check {shown}, which holds this output complete: {exc}. Check the remote "
                            "and the network, then run the same command again; nothing was changed") from None
    bad += wrong
    if bad:
        raise PublishFailed(f"{shown} holds this output complete ({MANIFEST_NAME} is there), but {plural(len(bad), 'file')} "
                            f"there differ from OUT ({', '.join(e.name for e in bad[:3])}): it was changed after "
                            f"it was published. Publishing never overwrites a complete destination: to repair it, "
                            f"remove its {MANIFEST_NAME} (rclone deletefile DEST/{MANIFEST_NAME}), then run the "
                            "same command again: it re-sends what differs")
    print(f"already published: {shown} holds this output, complete ({plural(len(output.body) + 2, 'file')}, sha256 "
          f"checked there by {how}); nothing was uploaded")
    return ExitCode.OK


def changed_in_out(output: Output) -> list[str]:
    """Files of OUT whose size (or, for the manifest, sha256) is not what was verified: a cheap re-check."""
    changed = []
    for e in output.body:
        try:
            if (output.root / e.name).stat().st_size != e.size:
                changed.append(e.name)
        except OSError:
            changed.append(e.name)
    try:
        if file_sha256(output.root / MANIFEST_NAME) != output.manifest_entry.sha256:
            changed.append(MANIFEST_NAME)
    except OSError:
        changed.append(MANIFEST_NAME)
    return changed


def publication(output: Output, shown: str, verified_by: str, rclone_version: str) -> dict[str, Any]:
    """Where, when and what was published: printed, and appended to RUNDIR/_PUBLISHED.json."""
    m = output.manifest
    return {"dest": shown, "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "out": str(output.root),
            "dataset": m["dataset"], "version": m["version"], "config_sha256": m["config_sha256"],
            "manifest_sha256": output.manifest_entry.sha256, "files": len(output.body) + 2,
            "bytes": output.size + len(output.sums), "verified_by": verified_by, "rclone": rclone_version}


def verified_output(out: Path) -> Output:
    """OUT as the manifest lists it, after `--verify` passed; PublishRefused with its problems otherwise."""
    from shard_pipeline.contract.verify import verify_output

    problems = verify_output(out)
    if problems:
        shown = "\n".join(f"  {p}" for p in problems[:SHOWN_PROBLEMS])
        more = f"\n  ... and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise OutputDoesNotVerify(f"refusing to publish {out}: it does not verify ({plural(len(problems), 'problem')}):\n"
                                  f"{shown}{more}\nfix or rebuild it; {verify_command(out)} lists every problem")
    manifest = read_json(out / MANIFEST_NAME)
    body = tuple(Entry(e["name"], int(e["bytes"]), e["sha256"]) for e in (*manifest["shards"], *manifest["files"]))
    raw = (out / MANIFEST_NAME).read_bytes()
    return Output(out, manifest, body, Entry(MANIFEST_NAME, len(raw), hashlib.sha256(raw).hexdigest()))


def find_run_dir(out: Path, manifest: dict[str, Any], given: Path | None) -> Path | None:
    """The run directory that wrote OUT (its manifest, reproducible, names none): --run-dir (checked), else the one
    default run dir that did, else None."""
    def wrote_out(run: Path) -> bool:
        try:
            cfg = read_json(RunDir(run).config_json)
            return cfg.get("config_sha256") == manifest["config_sha256"] and Path(cfg["execution"]["out"]) == out
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not a run's config.json
            return False

    if given is not None:  # RUNDIR (one of its languages wrote OUT) or that language's RUNDIR/<LANG>
        run = given.resolve()
        mine = [d for d in (run, *sorted(p.parent for p in run.glob("*/config.json"))) if wrote_out(d)]
        if not mine:
            raise PublishRefused(f"--run-dir {run} did not write {out} (no config.json there or in its languages' "
                                 "run dirs with this output's path and config sha256); give the run directory that "
                                 "made it, or leave --run-dir out")
        return mine[0]
    # a language's run dir RUNDIR/<LANG>
    found = [p.parent for runs in runs_roots() for p in sorted(runs.glob("*/*/config.json")) if wrote_out(p.parent)]
    return found[0] if len(found) == 1 else None


def dest_state(rclone: Rclone, dest: str, output: Output) -> DestState:
    """What DEST holds of this output; PublishRefused (DEST untouched) when it holds anything else."""
    listing = rclone.list_files(dest) or {}
    shown = mask(dest)
    if not listing:
        print(f"destination {shown} is empty")
        return DestState({})
    ours = {e.name for e in output.body} | {MANIFEST_NAME, SUMS_NAME}
    foreign = sorted(n for n in listing if n not in ours)
    there = b""
    if SUMS_NAME in listing:
        with tempfile.TemporaryDirectory(prefix="hplt-publish-") as tmp:
            there = rclone.read_file(dest, names_file(Path(tmp), [SUMS_NAME]))
    if there and not foreign:
        partial_sums = len(listing) == 1 and output.sums.startswith(there)  # broken while uploading it
        if there == output.sums or partial_sums:
            present = dict(listing)  # a partial _SHA256SUMS has the wrong size: send() replaces it
            if listing.get(MANIFEST_NAME) == output.manifest_entry.size:
                print(f"destination {shown} already holds this output, complete ({MANIFEST_NAME} is there); "
                      "checking it")
                return DestState(present, complete=True)
            print(f"destination {shown} holds a partial upload of this output "
                  f"({len(present)} of {plural(len(output.body) + 2, 'file')}); finishing it")
            return DestState(present)
    if there and MANIFEST_NAME not in listing and set(listing) <= sums_names(there) | {SUMS_NAME}:
        raise PublishRefused(f"refusing to publish to {shown}: it holds a partial upload of another output, or of "
                             f"an earlier version of this one (no {MANIFEST_NAME}; its {SUMS_NAME} names other "
                             "bytes). Publishing never overwrites: if that upload is yours and no longer wanted, "
                             "remove it (rclone purge DEST) and run the same command again; else choose an empty "
                             "destination. Nothing was changed")
    if there:
        why = f"its {SUMS_NAME} names another output"
    elif foreign:
        are = "is" if len(foreign) == 1 else "are"
        why = f"{plural(len(foreign), 'file')} there {are} not part of this output (e.g. {', '.join(foreign[:3])})"
    else:
        why = f"it holds files of this output's names but no {SUMS_NAME}, so they are not known to be a partial upload of it"
    raise PublishRefused(f"refusing to publish to {shown}: it already holds {plural(len(listing), 'file')} and {why}. "
                         "Publishing never overwrites: choose an empty destination (see what is there with "
                         f"rclone lsf -R DEST); nothing was changed")


def sums_names(sums: bytes) -> set[str]:
    """The file names a `_SHA256SUMS` lists."""
    return {line.split("  ", 1)[1] for line in sums.decode(errors="replace").splitlines() if "  " in line}


def record_publication(run: Path, record: dict[str, Any]) -> Path:
    """Append `record` to RUN/_PUBLISHED.json (one output may be published to several places)."""
    path = run / PUBLISHED_NAME
    doc = read_json(path) if path.exists() else {"publications": []}
    doc["publications"].append(record)
    write_bytes_atomic(path, json_bytes(doc), mode=RECORD_MODE)
    return path


def main(out: Path, dest: str, run_dir: Path | None = None) -> int:
    """`--publish OUT DEST` (cli.run_command refuses an empty one): verify OUT, upload it to DEST (or finish a
    partial upload), check it there, record it."""
    try:
        rclone = find_rclone(dest)
        out = out.resolve()
        refuse_dest_inside(rclone, dest, out, run_dir)
        return publish_one(rclone, out, dest, run_dir)
    except KeyboardInterrupt:  # during the verify or between rclone calls
        raise PublishFailed(f"interrupted (Ctrl-C); run the same command again: it finishes a partial upload "
                            f"to {mask(dest)}") from None
