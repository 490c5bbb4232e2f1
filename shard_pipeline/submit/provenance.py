"""Which code makes a run: the package version and the checkout's commit (run.json "code").

`git status` walks the checkout (~80 ms, more on a shared filesystem), so `start` launches it as soon as a run is
certain, on the core the serial start-up leaves idle, and `code_state` collects it (no thread: the local
executor forks later).
"""
from __future__ import annotations

import subprocess
from typing import Any

GIT_TIMEOUT = 10.0  # seconds; a checkout git cannot answer for is recorded as unknown

_probes: dict[str, subprocess.Popen] | None = None
_state: dict[str, Any] | None = None


def start() -> None:
    """Launch `git rev-parse HEAD` and `git status --porcelain` in the checkout, if the code runs from one."""
    global _probes
    if _probes is not None or _state is not None:
        return
    from shard_pipeline.paths import checkout_root

    root = checkout_root()
    _probes = {}
    if root is None:
        return
    for key, args in (("commit", ["rev-parse", "HEAD"]), ("dirty", ["status", "--porcelain"])):
        try:
            _probes[key] = subprocess.Popen(["git", "-C", str(root), *args], stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:  # no git: the commit is unknown
            _probes.clear()
            return


def code_state() -> dict[str, Any]:
    """{"commit", "dirty", "version"}: commit and dirty are None for an installed package or without git."""
    global _state
    if _state is None:
        start()
        answers = {key: _answer(p) for key, p in (_probes or {}).items()}
        commit, status = answers.get("commit"), answers.get("dirty")
        known = bool(commit) and status is not None
        _state = {"commit": commit if known else None, "dirty": bool(status.strip()) if known else None,
                  "version": _version()}
    return _state


def _answer(p: subprocess.Popen) -> str | None:
    try:
        out, _ = p.communicate(timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None
    return out.strip() if p.returncode == 0 else None


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hplt-shard")
    except PackageNotFoundError:
        return None
