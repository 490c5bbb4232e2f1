"""Sending an output's files to DEST, `_SHA256SUMS` first and `_MANIFEST.json` last, each checked there by
sha256 before the next (`--publish`); only this output's own broken uploads are ever removed."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.files import file_sha256
from shard_pipeline.submit.rclone import Rclone, RcloneFailed
from shard_pipeline.units import plural

SUMS_NAME = "_SHA256SUMS"
MIN_RATE = 1_000_000  # bytes/s: the wall-clock backstop of a transfer is 10 min + size at this rate


@dataclass(frozen=True)
class Entry:
    name: str  # path relative to OUT (and to DEST)
    size: int
    sha256: str


@dataclass(frozen=True)
class Output:
    root: Path
    manifest: dict[str, Any]
    body: tuple[Entry, ...]  # shards and listed files: everything but the manifest
    manifest_entry: Entry

    @property
    def sums(self) -> bytes:
        """`_SHA256SUMS`: every file of OUT, manifest last; `sha256sum -c _SHA256SUMS` checks a copy."""
        return "".join(f"{e.sha256}  {e.name}\n" for e in (*self.body, self.manifest_entry)).encode()

    @property
    def size(self) -> int:
        return sum(e.size for e in self.body) + self.manifest_entry.size


@dataclass(frozen=True)
class DestState:
    present: dict[str, int]  # this output's files already at DEST, with their size there
    complete: bool = False  # DEST holds this output's _SHA256SUMS and _MANIFEST.json


class OutChanged(RcloneFailed):
    """Files of OUT differ from what was verified: OUT was changed while it was published."""

    def __init__(self, names: list[str]):
        super().__init__(f"OUT changed: {', '.join(names[:3])}", None)
        self.names = names


def upload(rclone: Rclone, dest: str, output: Output, state: DestState) -> str:
    """Sums, body, then manifest; each checked at DEST before the next. Returns how sha256 was checked."""
    with tempfile.TemporaryDirectory(prefix="hplt-publish-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / SUMS_NAME).write_bytes(output.sums)
        sums = Entry(SUMS_NAME, len(output.sums), "")
        send(rclone, tmp, dest, [sums], state.present, tmp)
        how = send_checked(rclone, output.root, dest, output.body, state.present, tmp)
        how_m = send_checked(rclone, output.root, dest, (output.manifest_entry,), state.present, tmp)
    return how if how == how_m else f"{how} and {how_m}"


def send(rclone: Rclone, src: Path, dest: str, entries: Sequence[Entry], present: dict[str, int], tmp: Path) -> None:
    """Upload the entries DEST lacks; our own uploads of the wrong size there are removed first."""
    broken = [e.name for e in entries if e.name in present and present[e.name] != e.size]
    if broken:
        print(f"removing {len(broken)} broken partial uploads of this output: {', '.join(broken[:3])}")
        rclone.delete(dest, names_file(tmp, broken))
    todo = [e for e in entries if present.get(e.name) != e.size]
    if not todo:
        return
    size = sum(e.size for e in todo)
    print(f"uploading {plural(len(todo), 'file')} ({size:,} bytes)", flush=True)
    rclone.copy(src, dest, names_file(tmp, [e.name for e in todo]), timeout=transfer_timeout(size))


def send_checked(rclone: Rclone, src: Path, dest: str, entries: Sequence[Entry], present: dict[str, int],
                 tmp: Path) -> str:
    """send, then check every sha256 at DEST; a file that differs is removed and sent once more."""
    send(rclone, src, dest, entries, present, tmp)
    bad, how = check_sha256(rclone, dest, entries, tmp)
    if bad:
        print(f"{len(bad)} uploaded files differ from OUT ({', '.join(e.name for e in bad[:3])}); uploading them again")
        send(rclone, src, dest, bad, {e.name: -1 for e in bad}, tmp)
        bad, how = check_sha256(rclone, dest, bad, tmp)
    if bad:
        rclone.delete(dest, names_file(tmp, [e.name for e in bad]))  # never leave a wrong copy behind
        changed = [e.name for e in bad if (src / e.name).exists() and file_sha256(src / e.name) != e.sha256]
        if changed:
            raise OutChanged(changed)
        differ = "differs" if len(bad) == 1 else "differ"
        raise RcloneFailed(f"{plural(len(bad), 'file')} at the destination still {differ} from OUT after a second upload "
                           f"({', '.join(e.name for e in bad[:3])})", None)
    return how


def check_sha256(rclone: Rclone, dest: str, entries: Sequence[Entry], tmp: Path) -> tuple[list[Entry], str]:
    """The entries whose sha256 at DEST differs from OUT's, and how it was read there."""
    listed = names_file(tmp, [e.name for e in entries])
    got = rclone.remote_sha256(dest, listed)
    how = "the remote's sha256"
    missing = [e for e in entries if e.name not in got]
    if missing:
        size = sum(e.size for e in missing)
        print(f"checking {plural(len(missing), 'file')} by download ({size:,} bytes): the remote has no sha256", flush=True)
        got.update(rclone.downloaded_sha256(dest, names_file(tmp, [e.name for e in missing]), transfer_timeout(size)))
        how = "download" if len(missing) == len(entries) else "the remote's sha256 and download"
    return [e for e in entries if got.get(e.name) != e.sha256], how


def transfer_timeout(size: int) -> float:
    """A backstop only: rclone's own idle timeout ends a stalled transfer long before this."""
    return 600 + size / MIN_RATE


def names_file(tmp: Path, names: Sequence[str]) -> Path:
    """A --files-from-raw list (one path per line, no glob or comment processing)."""
    path = tmp / f"names-{len(list(tmp.glob('names-*')))}.txt"
    path.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    return path
