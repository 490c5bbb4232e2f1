"""Which languages a run takes: one LANG, a comma list, `all` (the folders of a local corpus root) or
--langs-file; how many queued tasks each gets; where a run of a list of languages keeps its run dir."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from shard_pipeline.errors import UsageError
from shard_pipeline.submit.args import Request

LANG_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def out_is_root(args: Request) -> bool:
    """A list of languages was asked for (a comma list, `all`, or --langs-file), even of one: OUT is then a root
    holding OUT/<LANG>/; one LANG writes OUT itself. Only the output differs, not the run."""
    return bool(args.langs_file) or (args.lang is not None and ("," in args.lang or args.lang == "all"))


def read_langs_file(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"--langs-file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise UsageError(f"--langs-file {path}: line {line} is not UTF-8 ({exc.reason} at byte {exc.start}); "
                         "it should list language codes like fin_Latn, one a line: is it the right file?") from None
    langs = []
    for n, line in enumerate(lines, 1):
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        if not LANG_CODE.match(code):
            raise UsageError(f"{path}:{n}: {code!r} is not a language code (e.g. fin_Latn)")
        langs.append(code)
    return langs


def input_root(args: Request, settings) -> Path | None:
    """The local folder holding LANG/, or None for inputs listed by URL."""
    root = args.local_root or (settings.v4_root if args.corpus == "v4" else settings.v3_root)
    return Path(root) if root is not None else None


def languages(args: Request, settings) -> list[str]:
    """The languages of the run, in the order given (sorted for `all`), each once."""
    if args.langs_file and args.lang:
        raise UsageError("give languages either as LANG or with --langs-file, not both")
    if args.langs_file:
        langs = read_langs_file(args.langs_file)
    elif args.lang == "all":
        root = input_root(args, settings)
        if root is None:
            raise UsageError("`all` lists the language folders of a local corpus root: give --local-root (or "
                             "V4_ROOT/V3_ROOT)")
        if not root.is_dir():
            raise UsageError(f"corpus root {root} is not a folder")
        langs = sorted(p.name for p in root.iterdir() if p.is_dir() and LANG_CODE.match(p.name))
    else:
        langs = [c.strip() for c in args.lang.split(",") if c.strip()]
        bad = [c for c in langs if not LANG_CODE.match(c)]
        if bad:
            raise UsageError(f"{bad[0]!r} is not a language code (e.g. fin_Latn)")
    dup = sorted({c for c in langs if langs.count(c) > 1})
    if dup:
        raise UsageError(f"language(s) given twice: {', '.join(dup)}")
    if not langs:
        raise UsageError("no languages given" + (f" ({args.langs_file} is empty)" if args.langs_file else ""))
    if args.dataset:
        raise UsageError("--dataset names one language's dataset; with several languages each gets "
                         "hplt-<corpus>-<subset>-<LANG>, as its single run would")
    return langs


def unit_room(budget: int, cpus: int) -> int:
    """Partition and write units that fit in `budget` queued array tasks of C units each, plan and
    finalize taking one each, however the units fall into the two arrays: (B - 2) C - 2 (C - 1)."""
    return max(0, (budget - 2) * cpus - 2 * (cpus - 1))


def share_budget(sizes: Sequence[int], room: int) -> list[int]:
    """Split `room` units (not array tasks: one may run units of several languages) between languages in
    proportion to bytes, at least 2 each; largest remainders, ties to the earlier language."""
    n = len(sizes)
    if room < 2 * n:
        raise UsageError(f"{n} languages need at least {2 * n} partition and write units (one of each per "
                         f"language); this run has room for {room} (MAX_TASKS, SUBMIT_LIMIT, --cpus-per-task): "
                         f"give at most {max(1, room // 2)} languages per run")
    extra, total = room - 2 * n, sum(sizes)
    if total == 0:
        return [2 + extra // n + (1 if i < extra % n else 0) for i in range(n)]
    exact = [extra * s / total for s in sizes]
    share = [int(e) for e in exact]
    for i in sorted(range(n), key=lambda i: (-(exact[i] - share[i]), i))[: extra - sum(share)]:
        share[i] += 1
    return [2 + s for s in share]


PARTITION_SHARE = 0.7  # at most this part of a language's units partition (docs/DESIGN.md, Many languages)


def smallest_first(sizes: dict[str, int]) -> list[str]:
    """The order of the languages' units in every array of the run: smallest input first (then by name), so small
    languages land first even on a throttled array, whose tasks start in index order. A language's own bytes
    do not depend on it: its run dir is the same wherever its units sit."""
    return sorted(sizes, key=lambda lang: (sizes[lang], lang))


def partition_units(inputs: int, share: int) -> int:
    """A language's partition units out of its `share`: the count that makes the largest unit (whole input shards)
    smallest within PARTITION_SHARE of the share, no more: every write waits for the slowest partition unit."""
    cap = max(1, min(share - 1, int(share * PARTITION_SHARE)))
    per = max(1, -(-inputs // cap))  # input shards in the largest unit
    return max(1, -(-inputs // per))


def default_run_dir(args: Request, subset: str, langs: list[str], runs_root: Path) -> Path:
    """runs/<corpus>-<subset>-<LANG>-<wds>[-<sources>], or ...-multi-<first>+<more>-<wds> for a list of languages."""
    wds = (args.wds or "all").replace(",", "_")
    if not out_is_root(args):
        src = f"-{args.sources.replace(',', '_')}" if args.sources else ""
        return runs_root / f"{args.corpus}-{subset}-{args.lang}-{wds}{src}"
    name = "all" if args.lang == "all" else f"{langs[0]}+{len(langs) - 1}" if len(langs) > 1 else langs[0]
    return runs_root / f"{args.corpus}-{subset}-multi-{name}-{wds}"
