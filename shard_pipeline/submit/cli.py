"""./hplt-shard: dispatch to verify, status, resume or a new run, and turn user errors into one line."""
from __future__ import annotations

import errno
import gc
import os
import sys
from pathlib import Path
from typing import Sequence

from shard_pipeline.commands import PROGRAM_ENV
from shard_pipeline.errors import EXIT_USAGE, ExitCode, UserError
from shard_pipeline.submit import launch
from shard_pipeline.submit.args import Request, build_parser


def command() -> None:
    """The process entry of ./hplt-shard: `main`, then an exit without the last collection (~30 ms; every file is
    closed and fsynced by then). The program's path goes to the environment, for the next steps printed."""
    os.environ.setdefault(PROGRAM_ENV, os.path.abspath(sys.argv[0]))
    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = Request.from_args(parse(argv))  # argparse ends here: below, one typed request
    except KeyboardInterrupt:
        print("hplt-shard: interrupted; nothing was written", file=sys.stderr)
        return ExitCode.INTERRUPTED
    try:
        return run_command(args, argv)
    except UserError as exc:  # conf, input, path and resume problems name file, line and reason
        print(f"hplt-shard: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # before any task started (a local run handles its own Ctrl-C: it stops its workers)
        print("hplt-shard: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except OSError as exc:  # a path the submitter could not read or write: one line, never a traceback
        print(f"hplt-shard: {os_error_line(exc, args)}", file=sys.stderr)
        return EXIT_USAGE


def parse(argv: Sequence[str]):  # noqa: ANN201
    """argparse's namespace; for several languages given as separate arguments, the one command that works."""
    parser = build_parser()
    ns, extra = parser.parse_known_args(list(argv))
    if extra and ns.lang and not any(a.startswith("-") for a in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}; LANG is one argument: give several languages "
                     f"comma-separated ({','.join([ns.lang, *extra])}) or one per line in --langs-file FILE")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if ns.publish is not None and not all(v.strip() for v in ns.publish):
        parser.error("argument --publish: an empty OUT or DEST (an unset shell variable?)")
    return ns


def os_error_line(exc: OSError, args: Request) -> str:
    """What was being done, the path and the reason, from an OSError nobody mapped closer to its source."""
    doing = ("reading the run directory" if args.status else "resuming the run" if args.resume else
             "checking the output folder" if args.verify or args.publish else "preparing the run")
    where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "") if exc.filename else "(no path)"
    line = f"{doing} failed: {where}: {exc.strerror or exc}"
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename:
        from shard_pipeline.access import access_step

        line += f"; {access_step(Path(os.fsdecode(exc.filename)), reading=bool(args.status or args.verify))}"
    return line


def run_command(args: Request, argv: Sequence[str]) -> int:
    if args.version:
        print(version_line())
        return ExitCode.OK
    if args.verify:
        from shard_pipeline.contract.verify import main as verify_main

        return verify_main([str(args.verify)])
    if args.publish:
        from shard_pipeline.contract.root import is_root
        from shard_pipeline.submit.publish import main as publish_main
        from shard_pipeline.submit.publish_root import publish_root

        entry = publish_root if is_root(Path(args.publish[0])) else publish_main  # ROOT: each LANG, one summary
        return entry(Path(args.publish[0]), args.publish[1], args.run_dir)
    if args.status:
        from shard_pipeline.run.view import report

        text, code = report(args.status.resolve())
        print(text)
        return code
    if args.resume:
        return launch.resume_run(args, argv)
    return launch.new_run(args, argv)


def version_line() -> str:
    """`hplt-shard 0.1.0 (commit abc123, uncommitted changes, code 1f2e3d4c5b6a)`: what run.json records as `code` and
    `code_version` (run/codeversion.py), which a run made by another code version is refused with."""
    from shard_pipeline.run import codeversion
    from shard_pipeline.submit.provenance import code_state

    code = code_state()
    commit = code.get("commit") or "unknown: not a git checkout"
    dirty = ", uncommitted changes" if code.get("dirty") else ""
    return (f"hplt-shard {code.get('version') or 'unknown version'} (commit {commit}{dirty}, "
            f"code {codeversion.short(codeversion.code_version())})")


if __name__ == "__main__":
    sys.exit(main())
