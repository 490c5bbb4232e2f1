"""./hplt-shard: dispatch to verify, status, resume or a new run, and turn user errors into one line."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from shard_pipeline.errors import EXIT_USAGE, UsageError, UserError
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit import launch
from shard_pipeline.submit.args import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return run_command(args, argv)
    except UserError as exc:  # conf, input, path and resume problems name file, line and reason
        print(f"hplt-shard: {exc}", file=sys.stderr)
        return exc.exit_code
    except (FileExistsError, ValueError) as exc:  # TODO(#12): raise UserError at the source instead
        print(f"hplt-shard: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.verify:
        from shard_pipeline.contract.verify import main as verify_main

        return verify_main([str(args.verify)])
    if args.status:
        from shard_pipeline.run import multi
        from shard_pipeline.run.status import status_text

        if multi.is_multi(args.status):
            from shard_pipeline.run.multi_status import multi_status_text

            print(multi_status_text(args.status.resolve()))
            return 0
        run = RunDir(args.status.resolve())
        if not run.config_json.exists():
            raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
        print(status_text(run))
        return 0
    from shard_pipeline.submit import multi as multi_submit

    if args.resume:
        if multi_submit.multi.is_multi(args.resume):
            return multi_submit.resume_multi(args, argv)
        return launch.resume_run(args, argv)
    if multi_submit.wants_multi(args):
        return multi_submit.new_multi_run(args, argv)
    if not args.lang:
        raise UsageError("LANG is required (e.g. eng_Latn)")
    return launch.new_run(args, argv)


if __name__ == "__main__":
    sys.exit(main())
