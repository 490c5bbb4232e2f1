"""Compressed input bytes: local files, and HTTP bodies that resume with Range requests after a drop.

urllib is imported when a URL is read, not with the module: it pulls in http, email and ssl
(15-40 ms), and most tasks read local files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

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


def _http_chunks(url: str, retries: int, backoff: float, count: Callable[[int], None] | None) -> Iterator[bytes]:
    """Yield the body of ``url``; resume with Range requests after a drop.

    ``retries`` counts consecutive failed attempts that brought no new bytes;
    any progress resets it, so a long shard over a flaky link still finishes,
    while a server that never delivers more fails after ``retries`` retries.
    The total length comes from Content-Length / Content-Range and is checked
    at the end: a body cut short is never taken for a short shard.
    """
    import http.client
    import urllib.error
    import urllib.request

    offset = 0
    total: int | None = None
    validator: tuple[str | None, str | None] | None = None  # (ETag, Last-Modified)
    failures = 0
    last_error = ""
    while True:
        progressed = False
        headers = {"Accept-Encoding": "identity", "User-Agent": "hplt-shard"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                status = resp.status
                got = (resp.headers.get("ETag"), resp.headers.get("Last-Modified"))
                if validator is None:
                    validator = got
                elif any(a and b and a != b for a, b in zip(validator, got, strict=True)):
                    raise StreamBroken("http_error", f"{url} changed while it was being read (ETag/Last-Modified)")
                skip = 0
                if status == 206:
                    cr = _content_range(resp.headers.get("Content-Range"))
                    if cr is None or cr[0] != offset:
                        raise StreamBroken(
                            "http_error",
                            f"bad Content-Range {resp.headers.get('Content-Range')!r} for a request from byte {offset}",
                        )
                    length = cr[1]
                elif status == 200:
                    skip = offset  # the server ignored Range: read from the start, drop what we have
                    cl = resp.headers.get("Content-Length")
                    length = int(cl) if cl is not None and cl.isdigit() else None
                else:
                    raise StreamBroken("http_error", f"unexpected HTTP status {status}")
                if length is not None:
                    if total is not None and length != total:
                        raise StreamBroken("http_error", f"length changed from {total} to {length} bytes")
                    total = length
                while skip:
                    dropped = resp.read(min(skip, READ_SIZE))
                    if not dropped:
                        break
                    skip -= len(dropped)
                if skip:
                    raise http.client.IncompleteRead(b"", skip)
                while True:
                    buf = resp.read(READ_SIZE)
                    if not buf:
                        break
                    if total is not None and offset + len(buf) > total:
                        raise StreamBroken("http_error", f"server sent more than the announced {total} bytes")
                    offset += len(buf)
                    progressed = True
                    if count is not None:
                        count(len(buf))
                    yield buf
            if total is None or offset == total:
                return
            last_error = f"connection closed at byte {offset} of {total}"
        except StreamBroken:
            raise
        except urllib.error.HTTPError as e:
            if not _retryable(e):
                raise StreamBroken("http_error", f"HTTP {e.code} {e.reason} for {url}") from None
            last_error = f"HTTP {e.code} {e.reason}"
        except (OSError, http.client.HTTPException) as e:
            last_error = f"{type(e).__name__}: {e}"
        failures = 1 if progressed else failures + 1
        if failures > retries:
            where = f"byte {offset} of {total}" if total is not None else f"byte {offset}"
            raise StreamBroken("short_read", f"gave up after {retries} retries at {where}: {last_error}")
        time.sleep(min(_MAX_BACKOFF, backoff * 2 ** (failures - 1)))


def compressed_chunks(
    location: str, retries: int, backoff: float, count: Callable[[int], None] | None
) -> Iterator[bytes]:
    if is_url(location):
        return _http_chunks(location, retries, backoff, count)
    return _file_chunks(location, count)
