"""rclone, called with argv lists only, bounded in time: the transport of `--publish`.

Short timeouts and a few retries (rclone's own environment variables: a user's take precedence) make a stalled
link fail; a failing call is one RcloneFailed, rclone's last error with DEST's secrets masked.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Sequence

from shard_pipeline.submit.dest import mask_text

# Connect and IO-idle timeouts, retries: a dead or stalled remote fails within about a minute.
# Defaults only: the caller's RCLONE_* environment variables of the same names win.
BOUNDS = {"RCLONE_CONTIMEOUT": "15s", "RCLONE_TIMEOUT": "60s", "RCLONE_LOW_LEVEL_RETRIES": "3",
          "RCLONE_RETRIES": "3", "RCLONE_RETRIES_SLEEP": "1s"}
# Stats lines (for long transfers) go to stderr at NOTICE; everything below is dropped.
LOGGING = ("--log-level", "NOTICE", "--stats", "30s", "--stats-one-line", "--stats-log-level", "NOTICE")
EXIT_DIR_NOT_FOUND = 3  # rclone's documented exit code for "directory not found"
_LOG_PREFIX = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} ")


class RcloneFailed(Exception):
    """An rclone call exited non-zero or ran past its deadline; ``str()`` is rclone's last error."""

    def __init__(self, message: str, returncode: int | None):
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True)
class Rclone:
    exe: str
    dest: str  # for masking it in messages

    def version(self) -> str:
        first = self.run(["version"], timeout=30).splitlines()
        return first[0].strip() if first else "rclone (unknown version)"

    def run(self, args: Sequence[str], *, timeout: float, echo: bool = False) -> str:
        """stdout of `rclone ARGS`; RcloneFailed on a non-zero exit or after `timeout` seconds (`echo`: rclone's
        stats lines go to our stderr while it runs)."""
        return self.run_rc(args, timeout=timeout, echo=echo, ok=(0,))[1]

    def run_rc(self, args: Sequence[str], *, timeout: float, ok: Sequence[int], echo: bool = False) -> tuple[int, str]:
        """(exit code, stdout) of `rclone ARGS` for an exit code in `ok`; else as run()."""
        argv = [self.exe, *args, *LOGGING]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace", env={**BOUNDS, **os.environ})
        except OSError as exc:
            raise RcloneFailed(f"cannot start {self.exe}: {exc}", None) from None
        out: list[str] = []
        tail: deque[str] = deque(maxlen=40)
        readers = [threading.Thread(target=_collect, args=(proc.stdout, out.append), daemon=True),
                   threading.Thread(target=_collect, args=(proc.stderr, lambda l: _stderr_line(self._masked(l), tail, echo)),
                                    daemon=True)]
        for t in readers:
            t.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RcloneFailed(f"rclone {args[0]} did not finish within {timeout:.0f} s (stopped)", None) from None
        except KeyboardInterrupt:  # Ctrl-C: stop rclone too, and say so instead of a traceback
            proc.kill()
            proc.wait()
            raise RcloneFailed(f"rclone {args[0]} interrupted (Ctrl-C)", None) from None
        for t in readers:
            t.join(timeout=10)
        if rc not in ok:
            raise RcloneFailed(self._masked(_last_error(tail) or f"rclone {args[0]} exited {rc}"), rc)
        return rc, "".join(out)

    def _masked(self, text: str) -> str:
        return mask_text(text, self.dest)

    def config_dump(self) -> dict[str, dict[str, str]]:
        """rclone's configured remotes with their options (secrets included: read, never shown)."""
        doc = json.loads(self.run(["config", "dump"], timeout=60) or "{}")
        return doc if isinstance(doc, dict) else {}

    # ---- the few operations publishing needs; `names` are paths relative to a folder

    def list_files(self, dest: str) -> dict[str, int] | None:
        """{path: size} of every file under dest; None when dest does not exist yet."""
        rc, text = self.run_rc(["lsjson", "-R", "--files-only", "--no-mimetype", dest], timeout=600,
                               ok=(0, EXIT_DIR_NOT_FOUND))
        if rc == EXIT_DIR_NOT_FOUND:
            return None
        return {e["Path"]: int(e["Size"]) for e in _json_list(text)}

    def remote_sha256(self, dest: str, names_file: Path) -> dict[str, str]:
        """sha256 the backend itself reports for the listed files (empty where it has none)."""
        text = self.run(["lsjson", "-R", "--files-only", "--no-mimetype", "--hash-type", "sha256",
                         "--files-from-raw", str(names_file), dest], timeout=3600)
        return {e["Path"]: e["Hashes"]["sha256"] for e in _json_list(text)
                if (e.get("Hashes") or {}).get("sha256")}

    def downloaded_sha256(self, dest: str, names_file: Path, timeout: float) -> dict[str, str]:
        """sha256 of the listed files as downloaded from dest (streamed, nothing kept on disk)."""
        text = self.run(["hashsum", "sha256", "--download", "--files-from-raw", str(names_file), dest],
                        timeout=timeout, echo=True)
        sums: dict[str, str] = {}
        for line in text.splitlines():
            digest, _, name = line.partition("  ")
            if name:
                sums[name] = digest.strip()
        return sums

    def read_file(self, dest: str, names_file: Path) -> bytes:
        """The bytes of the one file named in names_file (small files only)."""
        return self.run(["cat", "--files-from-raw", str(names_file), dest], timeout=120).encode()

    def copy(self, src: Path, dest: str, names_file: Path, timeout: float) -> None:
        """Upload the listed files of src; --immutable: an existing different file is an error, never replaced."""
        self.run(["copy", "--immutable", "--files-from-raw", str(names_file), str(src), dest],
                 timeout=timeout, echo=True)

    def delete(self, dest: str, names_file: Path) -> None:
        """Remove the listed files (only ever this output's own broken uploads)."""
        self.run(["delete", "--files-from-raw", str(names_file), dest], timeout=600)


def _json_list(text: str) -> list[dict]:
    """rclone's lsjson output; RcloneFailed (not a traceback) if it is not a JSON list."""
    try:
        doc = json.loads(text or "[]")
    except ValueError as exc:
        raise RcloneFailed(f"rclone lsjson printed no JSON list ({exc}): {text[:200]!r}", None) from None
    if not isinstance(doc, list):
        raise RcloneFailed(f"rclone lsjson printed {type(doc).__name__}, not a list", None)
    return doc


def _collect(stream: IO[str], sink) -> None:
    for line in stream:
        sink(line)


def _stderr_line(line: str, tail: deque, echo: bool) -> None:
    line = _LOG_PREFIX.sub("", line.rstrip("\n"))
    if not line.strip():
        return
    tail.append(line)
    if echo and "Transferred:" in line:
        print(f"rclone: {line.strip()}", file=sys.stderr, flush=True)


def _last_error(tail: deque) -> str:
    """The line that says why: rclone's final `Failed to ...`, else its last ERROR, else its last line."""
    lines = [l.strip() for l in tail if "Config file" not in l]
    for prefix in ("Failed to", "ERROR"):
        hits = [l for l in lines if l.startswith(prefix)]
        if hits:
            return hits[-1]
    return lines[-1] if lines else ""
