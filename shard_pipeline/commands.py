"""The commands a message tells its reader to run next, each one shell-quoted whole so that a path
with a space or a quote in it pastes as it is (argv lists, joined only for display)."""
from __future__ import annotations

import os
import shlex
import shutil

PROGRAM_ENV = "HPLT_SHARD_PROGRAM"  # the absolute path the tool was started by (cli.command); its tasks inherit it
README_WAY = "./hplt-shard"  # how the README starts the tool, from the checkout
NAME = "hplt-shard"  # the installed command


def program() -> str:
    """How a printed step starts the tool: `./hplt-shard` when that is the one in the current directory
    (the README's way), `hplt-shard` when PATH finds it, else the absolute path it was started by (the
    environment's, else this checkout's, else the installed command), which pastes from anywhere."""
    from shard_pipeline.paths import checkout_root

    checkout = checkout_root()
    path = os.environ.get(PROGRAM_ENV) or (str(checkout / NAME) if checkout else shutil.which(NAME))
    if not path:
        return README_WAY
    for way in (README_WAY, shutil.which(NAME)):
        try:
            if way and os.path.samefile(path, way):
                return README_WAY if way == README_WAY else NAME
        except OSError:
            pass
    return path


def command(*argv) -> str:
    """`argv` as one pasteable shell line."""
    return shlex.join(str(a) for a in argv)


def resume_command(root, *options) -> str:
    """Continue the run in `root`, with `options` after it (`--mem 4G`, `--executor local`)."""
    return command(program(), "--resume", root, *options)


def status_command(root) -> str:
    """Show where the run in `root` stands."""
    return command(program(), "--status", root)


def verify_command(out) -> str:
    """Check an output folder against its manifest."""
    return command(program(), "--verify", out)
