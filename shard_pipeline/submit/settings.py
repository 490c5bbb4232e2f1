"""Configuration: ``hplt-shard.conf`` and presets, parsed by Python, never sourced.

The HPLT sampler's ``KEY=VALUE`` format, but a conf is data: a value is kept literally or refused where it
must have a shape (conf_checks.py). Precedence: command line > conf > preset > default.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shard_pipeline.stages.clean_policy import CONF_KEYS
from shard_pipeline.submit.conf_checks import ConfError, check_module_load, check_setting

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
KEYS.update(CONF_KEYS)  # the --clean thresholds (CLEAN_MAX_BYTES, ...), documented in clean_policy.py

DEFAULT_V3_BASE_URL = "https://data.hplt-project.org/three/sorted"
CONF_NAME = "hplt-shard.conf"

_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ACCOUNT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")  # where ACCOUNT becomes part of a path
ACCOUNT_FIELD = "{ACCOUNT}"


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
    """A path setting with {ACCOUNT} filled in (a preset cannot name one group's folder for everyone: a run writes
    there); None when it names {ACCOUNT} and ACCOUNT is not set, or when it is not given."""
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


@dataclass(frozen=True)
class _Layers:
    """The settings' sources, highest precedence first: command line, conf, preset."""

    layers: tuple[dict[str, tuple[str, str]], ...]
    repo_root: Path

    def pick(self, key: str) -> tuple[str, str] | None:
        """(checked value, where it was set) from the first layer that sets `key`."""
        for layer in self.layers:
            if key in layer:
                value, where = layer[key]
                return check_setting(key, value, where), where
        return None

    def path_of(self, key: str) -> Path | None:
        got = self.pick(key)
        if got is None:
            return None
        value, where = got
        return _resolve(value, Path.cwd() if where.startswith("command line") else self.repo_root)

    def text(self, key: str, default: str | None = None) -> str | None:
        got = self.pick(key)
        return got[0] if got else default

    def number(self, key: str, default: int | None) -> int | None:
        got = self.pick(key)
        return int(got[0]) if got else default


def _layers(cli: dict[str, str | None], conf_path: Path | None, repo_root: Path,
            preset_dir: Path) -> tuple[_Layers, str | None]:
    """The layers and the preset's name; the preset is the one the command line or the conf names."""
    unknown = [k for k in cli if k not in KEYS]
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; known: {', '.join(KEYS)}")
    given = {k: (v, f"command line ({k})") for k, v in cli.items() if v is not None}
    if conf_path is None and (repo_root / CONF_NAME).is_file():
        conf_path = repo_root / CONF_NAME
    conf = _parse_lines(conf_path) if conf_path is not None else {}
    preset_entry = given.get("PRESET") or conf.get("PRESET")
    if preset_entry is None:
        return _Layers((given, conf), repo_root), None
    preset_name = check_setting("PRESET", *preset_entry)
    preset = _parse_lines(_preset_path(preset_name, preset_dir, preset_entry[1]))
    if "PRESET" in preset:
        raise ConfError(preset["PRESET"][1], "a preset may not name another PRESET")
    return _Layers((given, conf, preset), repo_root), preset_name


def load_settings(*, cli: dict[str, str | None], conf_path: Path | None, repo_root: Path,
                  preset_dir: Path | None = None) -> Settings:
    """Merge command line (``cli``: conf key -> value or None) > conf (``conf_path``, else
    ``<repo_root>/hplt-shard.conf``) > preset > defaults, validating every value. Relative paths join
    ``repo_root``, or the current directory for the command line's."""
    repo_root = Path(repo_root)
    got, preset_name = _layers(cli, conf_path, repo_root, Path(preset_dir) if preset_dir is not None else repo_root / "presets")
    module_entry = got.pick("MODULE_LOAD_CMD")
    module_loads = check_module_load(*module_entry) if module_entry else ()
    counts_index = _account_path("COUNTS_INDEX", got.pick("COUNTS_INDEX"), got.pick("ACCOUNT"), got.path_of) or (
        None if got.pick("COUNTS_INDEX") else repo_root / "counts-index")
    return Settings(
        account=got.text("ACCOUNT"),
        worker_partition=got.text("WORKER_PARTITION", "small"),  # type: ignore[arg-type]
        python=got.text("PYTHON", sys.executable or "python3"),  # type: ignore[arg-type]
        module_loads=module_loads,
        worker_mem=got.text("WORKER_MEM", "4G"),  # type: ignore[arg-type]
        max_tasks=got.number("MAX_TASKS", 200),  # type: ignore[arg-type]
        submit_limit=got.number("SUBMIT_LIMIT", None),
        counts_index=counts_index,
        runs_root=_account_path("RUNS_ROOT", got.pick("RUNS_ROOT"), got.pick("ACCOUNT"), got.path_of) or repo_root / "runs",
        license=got.text("LICENSE"),
        preset=preset_name,
        v3_base_url=got.text("V3_BASE_URL", DEFAULT_V3_BASE_URL),  # type: ignore[arg-type]
        v3_root=got.path_of("V3_ROOT"),
        v4_root=got.path_of("V4_ROOT"),
        time_limit=got.text("TIME_LIMIT"),
        cpus_per_task=got.number("CPUS_PER_TASK", 1),  # type: ignore[arg-type]
        clean_values=tuple((k, v) for k in KEYS if k.startswith("CLEAN_") for v in [got.text(k)] if v is not None),
    )
