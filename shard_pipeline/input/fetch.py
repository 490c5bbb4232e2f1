"""Compressed input bytes: local files, and HTTP bodies that resume with Range requests after a drop.

urllib is imported when a URL is read, not with the module: it pulls in http, email and ssl
(15-40 ms), and most tasks read local files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shard_pipeline.input.failures import StreamBroken

HTTP_RETRIES = 5  # consecutive failed attempts without progress before an HTTP shard is given up
HTTP_BACKOFF = 1.0  # seconds before the first retry; doubled each time (capped at 120 s)
READ_SIZE = 1 << 17  # compressed bytes per read() of a file or HTTP body (zstd's recommended input size)
_MAX_BACKOFF = 120.0


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _file_chunks(path: str, count: Callable[[int], None] | None) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while True:
            buf = fh.read(READ_SIZE)
            if not buf:
                return
            if count is not None:
                count(len(buf))
            yield buf


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """Parse ``bytes START-END/TOTAL`` into (START, TOTAL or None)."""
    if not value or not value.startswith("bytes "):
        return None
    try:
        span, _, total = value[6:].partition("/")
        start = int(span.split("-", 1)[0])
        return start, (None if total.strip() == "*" else int(total))
    except ValueError:
        return None


def _retryable(exc: BaseException) -> bool:
    import http.client
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in (408, 425, 429) or exc.code >= 500
    return isinstance(exc, (OSError, http.client.HTTPException))


@dataclass
class _Download:
    """Where a resumable HTTP read of one URL stands, across its requests."""

    url: str
    offset: int = 0  # bytes of the body yielded so far
    total: int | None = None  # the body's length, once a response announced it
    validator: tuple[str | None, str | None] | None = None  # (ETag, Last-Modified) of the first response

    def accept(self, resp) -> int:  # type: ignore[no-untyped-def]
        """Check a response against what was read before; the bytes to drop from its start (Range ignored)."""
        got = (resp.headers.get("ETag"), resp.headers.get("Last-Modified"))
        if self.validator is None:
            self.validator = got
        elif any(a and b and a != b for a, b in zip(self.validator, got, strict=True)):
            raise StreamBroken("http_error", f"{self.url} changed while it was being read (ETag/Last-Modified)")
        skip = 0
        if resp.status == 206:
            cr = _content_range(resp.headers.get("Content-Range"))
            if cr is None or cr[0] != self.offset:
                raise StreamBroken("http_error", f"bad Content-Range {resp.headers.get('Content-Range')!r} for a "
                                                 f"request from byte {self.offset}")
            length = cr[1]
        elif resp.status == 200:
            skip = self.offset  # the server ignored Range: read from the start, drop what we have
            cl = resp.headers.get("Content-Length")
            length = int(cl) if cl is not None and cl.isdigit() else None
        else:
            raise StreamBroken("http_error", f"unexpected HTTP status {resp.status}")
        if length is not None:
            if self.total is not None and length != self.total:
                raise StreamBroken("http_error", f"length changed from {self.total} to {length} bytes")
            self.total = length
        return skip

    def body(self, resp, skip: int, count: Callable[[int], None] | None) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
        """The response's new bytes, after dropping `skip` already read; the offset follows them."""
        import http.client

        while skip:
            dropped = resp.read(min(skip, READ_SIZE))
            if not dropped:
                break
            skip -= len(dropped)
        if skip:
            raise http.client.IncompleteRead(b"", skip)
        while buf := resp.read(READ_SIZE):
            if self.total is not None and self.offset + len(buf) > self.total:
                raise StreamBroken("http_error", f"server sent more than the announced {self.total} bytes")
            self.offset += len(buf)
            if count is not None:
                count(len(buf))
            yield buf

    def where(self) -> str:
        return f"byte {self.offset} of {self.total}" if self.total is not None else f"byte {self.offset}"


def _http_chunks(url: str, retries: int, backoff: float, count: Callable[[int], None] | None) -> Iterator[bytes]:
    """Yield the body of ``url``, resuming with Range requests after a drop; ``retries`` counts consecutive
    attempts that brought no new bytes. The total length is checked at the end: a body cut short is no shard."""
    import http.client
    import urllib.error
    import urllib.request

    state = _Download(url)
    failures = 0
    while True:
        before = state.offset
        headers = {"Accept-Encoding": "identity", "User-Agent": "hplt-shard"}
        if state.offset:
            headers["Range"] = f"bytes={state.offset}-"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                yield from state.body(resp, state.accept(resp), count)
            if state.total is None or state.offset == state.total:
                return
            last_error = f"connection closed at byte {state.offset} of {state.total}"
        except StreamBroken:
            raise
        except urllib.error.HTTPError as e:
            if not _retryable(e):
                raise StreamBroken("http_error", f"HTTP {e.code} {e.reason} for {url}") from None
            last_error = f"HTTP {e.code} {e.reason}"
        except (OSError, http.client.HTTPException) as e:
            last_error = f"{type(e).__name__}: {e}"
        failures = 1 if state.offset > before else failures + 1
        if failures > retries:
            raise StreamBroken("short_read", f"gave up after {retries} retries at {state.where()}: {last_error}")
        time.sleep(min(_MAX_BACKOFF, backoff * 2 ** (failures - 1)))


def compressed_chunks(
    location: str, retries: int, backoff: float, count: Callable[[int], None] | None
) -> Iterator[bytes]:
    if is_url(location):
        return _http_chunks(location, retries, backoff, count)
    return _file_chunks(location, count)
