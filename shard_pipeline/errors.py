"""One error type for everything a user can cause: the submitter prints its message, no traceback.

Anything that is not a UserError is a bug: the submitter lets its traceback through.
"""
from __future__ import annotations

# Exit codes of ./hplt-shard (documented in docs/operations.md).
EXIT_OK = 0
EXIT_FAILED = 1  # a run, a stage or a check failed; the message says what and how to resume
EXIT_USAGE = 2  # the command line, the conf, the inputs or the paths are wrong; nothing was started


class UserError(Exception):
    """A problem the user can fix (arguments, conf, inputs, paths); ``str()`` is the whole message."""

    exit_code = EXIT_USAGE


class UsageError(UserError):
    """A problem with the command line, the conf or the input selection: nothing was written."""
