"""`./hplt-shard --publish ROOT DEST`: each `ROOT/<LANG>` to `DEST/<LANG>` by publish.py, one summary.

DEST is checked once, with ROOT as OUT. Each language is held by its own lock only while it is published (a run
claims each `ROOT/<LANG>`, and may land another meanwhile); one's failure does not stop the others, and languages
not landed fail the root, as in `--verify ROOT`. ROOT's root manifest, as scanned, goes last, once every language
is at DEST. Exit 0 when all are there, 2 when every one was refused before any upload, else 1.
"""
from __future__ import annotations

import hashlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME
from shard_pipeline.contract.root import RootEntries, scan, staged_line
from shard_pipeline.contract.verify_root import against_root_manifest, not_landed
from shard_pipeline.errors import EXIT_FAILED, EXIT_USAGE, ExitCode, UserError
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit.dest import mask
from shard_pipeline.submit.publish import (
    PublishFailed,
    PublishRefused,
    find_rclone,
    names_file,
    publish_one,
    refuse_dest_inside,
)
from shard_pipeline.submit.rclone import Rclone, RcloneFailed


class RootNotPublished(UserError):
    """Some languages of ROOT are not at DEST: the summary names each, and the next step."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class LangOutcome:
    lang: str
    code: int  # 0: at DEST complete and checked
    message: str = ""


def sub_dest(dest: str, lang: str) -> str:
    """DEST/<lang> as rclone reads it: `remote:` + lang for a remote's root, else one `/` between."""
    return dest + lang if dest.endswith(":") else dest.rstrip("/") + "/" + lang


def language_run_dirs(root: Path, langs: tuple[str, ...], run_dir: Path | None) -> dict[str, Path | None]:
    """`--run-dir RUNDIR` of a run of several languages: RUNDIR/<LANG> for each language it holds."""
    if run_dir is None:
        return {lang: None for lang in langs}  # publish.find_run_dir looks for each under runs/
    run_dir = run_dir.resolve()
    found = {lang: run_dir / lang if RunDir(run_dir / lang).config_json.is_file() else None for lang in langs}
    if not any(found.values()):
        raise PublishRefused(f"--run-dir {run_dir} holds no run directory of a language of {root} (no "
                             f"{run_dir}/LANG/config.json for {', '.join(langs[:3])}{', ...' if len(langs) > 3 else ''}): "
                             "give the RUNDIR of the run of several languages that made ROOT, or leave --run-dir out; "
                             "nothing was uploaded")
    return found


def publish_language(rclone: Rclone, out: Path, dest: str, run_dir: Path | None) -> LangOutcome:
    """One language, as `--publish ROOT/<LANG> DEST/<LANG>` would: its failure is an outcome, not the end."""
    try:
        publish_one(rclone, out, dest, run_dir)
        return LangOutcome(out.name, 0)
    except UserError as exc:
        print(f"hplt-shard: {out.name}: {exc}", file=sys.stderr, flush=True)
        return LangOutcome(out.name, exc.exit_code, str(exc).splitlines()[0])


def entry_outcomes(entries: RootEntries) -> list[LangOutcome]:
    """Languages that have not landed (being written, or asked for in the root manifest), and folders that may
    be a broken language: they fail the root."""
    out = [LangOutcome(s.lang, EXIT_FAILED, f"not landed: {staged_line(s)}; finish that run, then run the same "
                       "command again") for s in entries.unlanded]
    missing, _, _ = against_root_manifest(entries.root, entries.languages)
    out += [LangOutcome(l, EXIT_FAILED, f"asked for in {ROOT_MANIFEST_NAME} and not landed: its run's --status says "
                        "why; land it, then run the same command again") for l in not_landed(missing, entries)]
    out += [LangOutcome(f, EXIT_FAILED, "not a language output (no _MANIFEST.json), not published: move it out of "
                        "ROOT, or rebuild the language with its run") for f in entries.other_folders]
    return out


def publish_root_manifest(rclone: Rclone, dest: str, snapshot: bytes) -> LangOutcome:
    """ROOT's root manifest (its bytes when ROOT was scanned) to DEST, then checked there by a download."""
    want = hashlib.sha256(snapshot).hexdigest()
    try:
        with tempfile.TemporaryDirectory(prefix="hplt-shard-publish-") as tmp:
            folder = Path(tmp) / "root"
            folder.mkdir()
            (folder / ROOT_MANIFEST_NAME).write_bytes(snapshot)
            listed = names_file(Path(tmp), [ROOT_MANIFEST_NAME])
            there = rclone.downloaded_sha256(dest, listed, timeout=600).get(ROOT_MANIFEST_NAME)
            if there == want:
                return LangOutcome(ROOT_MANIFEST_NAME, 0)
            if there is not None:  # an earlier publish's, naming fewer languages: its languages are all still there
                rclone.delete(dest, listed)
            rclone.copy(folder, dest, listed, timeout=600)
            there = rclone.downloaded_sha256(dest, listed, timeout=600).get(ROOT_MANIFEST_NAME)
    except RcloneFailed as exc:
        there = f"not uploaded ({exc})"
    if there != want:
        return LangOutcome(ROOT_MANIFEST_NAME, EXIT_FAILED, f"not at DEST as in ROOT: {there or 'missing'}; the "
                           "languages are; run the same command again")
    print(f"published {ROOT_MANIFEST_NAME} to {mask(dest)}, last, checked there", flush=True)
    return LangOutcome(ROOT_MANIFEST_NAME, 0)


def summary(root: Path, dest: str, outcomes: list[LangOutcome]) -> tuple[str, int]:
    """One summary and the exit code of the whole root."""
    done = [o.lang for o in outcomes if o.code == 0]
    failed = [o for o in outcomes if o.code != 0]
    shown = f"{mask(dest)}/LANG"
    if not failed:
        langs = f"{len(done)} language" + ("s" if len(done) != 1 else "")
        return f"published {langs} of {root} to {shown}, each complete and checked there: {', '.join(done)}", 0
    lines = [f"not published from {root} to {shown}: {len(failed)} of {len(outcomes)}"
             + (f" (published: {', '.join(done)})" if done else " (none published)") + ":"]
    lines += [f"  {o.lang}: {o.message}" for o in failed]
    lines.append("fix each as its message says, then run the same command again: the languages already at DEST "
                 "are checked there, not sent again, and a partial upload is finished")
    refused_only = not done and all(o.code == EXIT_USAGE for o in failed)
    return "\n".join(lines), EXIT_USAGE if refused_only else EXIT_FAILED


def publish_root(root: Path, dest: str, run_dir: Path | None = None) -> int:
    """Every language output of ROOT to DEST/<LANG>, one by one; one summary (exit 0 only when all are there)."""
    rclone = find_rclone(dest)
    root = root.resolve()
    entries = scan(root)
    for d in (dest, *(sub_dest(dest, lang) for lang in entries.languages)):
        refuse_dest_inside(rclone, d, root, run_dir)
    runs = language_run_dirs(root, entries.languages, run_dir)
    manifest = root / ROOT_MANIFEST_NAME
    snapshot = manifest.read_bytes() if manifest.is_file() else None  # the languages as scanned, not as later landed
    print(f"{root}: a multi-language root; publishing its {len(entries.languages)} language outputs one by one "
          f"to {mask(dest)}/LANG", flush=True)
    if entries.other_files:
        print(f"not published (files beside the language outputs): {', '.join(entries.other_files)}")
    outcomes: list[LangOutcome] = []
    for lang in entries.languages:
        target = sub_dest(dest, lang)
        print(f"== {lang}: {root / lang} -> {mask(target)}", flush=True)
        try:
            outcomes.append(publish_language(rclone, root / lang, target, runs[lang]))
        except KeyboardInterrupt:
            done = [o.lang for o in outcomes if o.code == 0]
            raise PublishFailed(f"interrupted (Ctrl-C) while publishing {lang} to {mask(target)}"
                                + (f" (published: {', '.join(done)})" if done else "")
                                + "; run the same command again: it checks the published languages at DEST and "
                                "finishes the others") from None
    outcomes += entry_outcomes(entries)
    if snapshot is not None and all(o.code == 0 for o in outcomes):
        last = publish_root_manifest(rclone, dest, snapshot)
        outcomes += [last] if last.code else []
    text, code = summary(root, dest, outcomes)
    if code:
        raise RootNotPublished(text, code)
    print(text)
    return ExitCode.OK
