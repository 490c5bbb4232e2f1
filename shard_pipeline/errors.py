"""One error type for everything a user can cause: the submitter prints its message, no traceback.

Anything that is not a UserError is a bug: the submitter lets its traceback through.
"""
from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    """Every exit code of ./hplt-shard (README and docs/operations.md list them)."""

    OK = 0  # done (--status: the run is done)
    FAILED = 1  # a run, a stage or a check failed (--status: failed, or interrupted); the message says the next step
    USAGE = 2  # the command line, the conf, the inputs or the paths are wrong; nothing was started
    BUSY = 3  # --status: jobs still queued or running
    STUCK = 4  # --status: a job pends for a reason that does not clear by itself
    INTERRUPTED = 128 + signal.SIGINT  # Ctrl-C; SIGHUP / SIGTERM give 128 + their number (`signal_exit`)


def signal_exit(signum: int) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + int(signum)


EXIT_OK, EXIT_FAILED, EXIT_USAGE = ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE


class UserError(Exception):
    """A problem the user can fix (arguments, conf, inputs, paths); ``str()`` is the whole message."""

    exit_code = EXIT_USAGE


class UsageError(UserError):
    """A problem with the command line, the conf or the input selection: nothing was written."""
