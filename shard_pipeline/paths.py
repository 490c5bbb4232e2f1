"""Where the code and its data files are, and where an invocation's defaults live.

The presets, the manifest schema, the card's template and the Slurm batch script ship inside the package,
so an installed `hplt-shard` finds them as a checkout does; default places are relative to `home()`.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PARENT = PACKAGE_DIR.parent  # what PYTHONPATH needs for `python -m shard_pipeline...`
PRESET_DIR = PACKAGE_DIR / "submit" / "presets"
MANIFEST_SCHEMA = PACKAGE_DIR / "contract" / "corpus-manifest.schema.json"
JOB_SCRIPT = PACKAGE_DIR / "submit" / "executors" / "slurm_job.sh"
CARD_TEMPLATE = PACKAGE_DIR / "stages" / "card.md"  # the dataset card's prose


def checkout_root() -> Path | None:
    """The source checkout this code runs from, or None when it is installed (site-packages)."""
    root = PACKAGE_PARENT
    return root if (root / "pyproject.toml").is_file() and (root / "hplt-shard").is_file() else None


def home() -> Path:
    """The folder default paths are relative to: $HPLT_SHARD_HOME (keeps runs/ and counts-index/ off a shared
    or read-only checkout), else the checkout, else the current directory."""
    chosen = os.environ.get("HPLT_SHARD_HOME")
    return Path(chosen).expanduser().resolve() if chosen else checkout_root() or Path.cwd()
