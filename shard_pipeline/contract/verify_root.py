"""`./hplt-shard --verify ROOT` of a multi-language root: every language output with the one verifier.

ROOT passes only when every `ROOT/<LANG>/` verifies alone and nothing in ROOT could be a language that is
missing or broken (asked for and not landed, not named or not the manifest that landed, a marked
`<LANG>.tmp`, another folder). Other files are named, not checked. What makes a root: contract/root.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shard_pipeline.commands import command, program
from shard_pipeline.contract.root import RootEntries, scan, staged_line
from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.swap import manifest_sha
from shard_pipeline.contract.root_manifest import read_root_manifest
from shard_pipeline.contract.verify_manifest import Problem
from shard_pipeline.errors import ExitCode
from shard_pipeline.units import plural

SHOWN_PER_LANGUAGE = 5  # a failed language's first problems in the summary; --verify ROOT/LANG lists all


@dataclass(frozen=True)
class LangResult:
    lang: str
    problems: tuple[Problem, ...]  # file names relative to ROOT/<lang>
    rows: int = 0
    shards: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unread(self) -> bool:
        """Failed only for files this user may not read: unchecked, not shown damaged."""
        return bool(self.problems) and all(p.unreadable for p in self.problems)


@dataclass(frozen=True)
class RootResult:
    entries: RootEntries
    results: tuple[LangResult, ...]
    missing: tuple[str, ...] = ()  # asked for by a run into ROOT (its root manifest), not landed
    unlisted: tuple[str, ...] = ()  # a language output the root manifest does not name
    changed: tuple[str, ...] = ()  # a language output whose manifest is not the one that landed

    @property
    def failed(self) -> tuple[LangResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.incomplete

    @property
    def incomplete(self) -> bool:
        """ROOT is not what its runs were asked for: a language not landed, or one it does not name."""
        e = self.entries
        return bool(e.unlanded or e.other_folders or self.missing or self.unlisted or self.changed)

    @property
    def exit_code(self) -> ExitCode:
        """As for one output: 2 when nothing is wrong but files this user may not read, 1 when anything is."""
        if self.ok:
            return ExitCode.OK
        unread_only = all(r.unread for r in self.failed) and not self.incomplete
        return ExitCode.USAGE if unread_only else ExitCode.FAILED


Verifier = Callable[[Path, bool], "list[Problem]"]  # contract.verify.verify_output(out, deep): one output


def verify_language(out: Path, deep: bool, verify_one: Verifier) -> LangResult:
    problems = verify_one(out, deep)
    if problems:
        return LangResult(out.name, tuple(problems))
    m = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    return LangResult(out.name, (), int(m["rows"]), len(m["shards"]))


def verify_root(root: Path, verify_one: Verifier, *, deep: bool = True,
                each: Callable[[LangResult], None] = lambda r: None, entries: RootEntries | None = None) -> RootResult:
    """Verify every language output of ROOT in name order; `each` sees each result as it is known."""
    entries = entries or scan(root)
    results = []
    for lang in entries.languages:
        results.append(verify_language(Path(root) / lang, deep, verify_one))
        each(results[-1])
    return RootResult(entries, tuple(results), *against_root_manifest(Path(root), entries.languages))


def not_landed(missing: tuple[str, ...], e: RootEntries) -> list[str]:
    """The missing languages ROOT shows no trace of: one being written, or a folder without its manifest, is
    named as that instead."""
    named = {s.lang for s in e.unlanded} | {f.split("/")[0].split(" ")[0] for f in e.other_folders}
    return [l for l in missing if l not in named]


def against_root_manifest(root: Path, outputs: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """(missing, unlisted, changed) languages by ROOT's root manifest; nothing to compare without one."""
    m = read_root_manifest(root)
    if m is None:
        return (), (), ()
    changed = tuple(l for l in outputs if l in m.landed and manifest_sha(root / l) != m.landed[l])
    return m.missing(outputs), m.unlisted(outputs), changed


def language_lines(r: LangResult, shallow: bool) -> list[str]:
    """`lang: OK: ...`, or `lang: FAILED: N problems` and the first of them, named from ROOT."""
    if r.ok:
        return [f"{r.lang}: OK: {r.rows} rows in {r.shards} shards verified" + (" (shallow)" if shallow else "")]
    more = len(r.problems) - SHOWN_PER_LANGUAGE
    return [f"{r.lang}: FAILED: {plural(len(r.problems), 'problem')}" + (f", the first {SHOWN_PER_LANGUAGE}:" if more > 0 else ":"),
            *(f"  {r.lang}/{p.file}: {p.what}" for p in r.problems[:SHOWN_PER_LANGUAGE]),
            *([f"  ... and {more} more" ] if more > 0 else [])]


def entry_lines(e: RootEntries) -> list[str]:
    """What ROOT holds besides its language outputs, one line per kind."""
    lines = [f"not landed: {staged_line(s)}" for s in e.unlanded]
    lines += [f"note: {s.lang}/ verified as it is now; {staged_line(s)} and replaces it when it finishes"
              for s in e.replacing]
    if e.other_folders:
        lines.append(f"not a language output (no {MANIFEST_NAME}): {', '.join(e.other_folders)}")
    if e.other_files:
        lines.append(f"not checked (files beside the language outputs): {', '.join(e.other_files)}")
    return lines


def summary_line(res: RootResult) -> str:
    e, n = res.entries, len(res.results)
    if res.ok:
        rows, shards = sum(r.rows for r in res.results), sum(r.shards for r in res.results)
        return (f"OK: {plural(n, 'language')} verified ({plural(rows, 'row')} in {plural(shards, 'shard')}) "
                f"in {e.root}")
    parts = [f"{n - len(res.failed)} of {plural(n, 'language')} verified"]
    failed, unread = [r for r in res.failed if not r.unread], [r for r in res.failed if r.unread]
    if failed:
        names = ", ".join(r.lang for r in failed)
        parts.append(f"{len(failed)} failed: {names} ({command(program(), '--verify', e.root)}/LANG lists every problem)")
    if unread:
        parts.append(f"{len(unread)} not readable by this user, so not checked: {', '.join(r.lang for r in unread)} "
                     "(the lines above say whose files and the way on)")
    if gone := not_landed(res.missing, e):
        parts.append(f"{len(gone)} asked for and not landed: {', '.join(gone)} (its run's --status "
                     "says why; --resume or run it again)")
    if res.unlisted:
        parts.append(f"{len(res.unlisted)} not named in {ROOT_MANIFEST_NAME}: {', '.join(res.unlisted)} (no run into "
                     "ROOT was asked for it: move it out of ROOT, or run it into ROOT)")
    if res.changed:
        parts.append(f"{len(res.changed)} not the output that landed ({ROOT_MANIFEST_NAME} names another "
                     f"{MANIFEST_NAME}): {', '.join(res.changed)} (run it again into ROOT)")
    if e.unlanded:
        parts.append(f"{len(e.unlanded)} not landed: {', '.join(s.lang for s in e.unlanded)} (finish the run: "
                     "--status, then --resume)")
    if e.other_folders:
        n_other = len(e.other_folders)
        parts.append(f"{n_other} folder{' that is' if n_other == 1 else 's that are'} no language output "
                     "(move it out of ROOT, or rebuild the language with its run)")
    return "FAILED: " + "; ".join(parts)


def root_main(root: Path, deep: bool, verify_one: Verifier) -> int:
    """Print each language's result as it is known, what else ROOT holds, and one summary line; 0 only when all pass
    (exit codes: `RootResult.exit_code`)."""
    root = Path(root)
    entries = scan(root)
    print(f"{root}: a multi-language root; verifying its {len(entries.languages)} language outputs one by one")
    res = verify_root(root, verify_one, deep=deep, each=lambda r: print("\n".join(language_lines(r, not deep)), flush=True),
                      entries=entries)
    for line in entry_lines(res.entries):
        print(line)
    print(summary_line(res))
    return res.exit_code
