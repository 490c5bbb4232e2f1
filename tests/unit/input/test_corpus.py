"""Finding input shards: v3/v4 layouts, WDS and source selection, HTTP maps, and errors
that name what was looked for."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shard_pipeline.input.corpus import (
    InputError,
    find_shards,
    parse_sources,
    parse_wds,
)

V4_ENGLISH = ["10_1.cc", "9_1.cc", "9_2.cc", "9_10.cc", "9_1.ia", "9_1.ab", "8_30.ia", "5_3.cc", "1_1.cc"]
V3_NAMES = ["10_1", "9_1", "9_2", "9_103", "5_1", "1_1", "1_2"]


def layout(root: Path, lang: str, names: list[str], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    """Shard files named as in the release (contents do not matter for listing)."""
    d = root / lang
    d.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        (d / f"{name}.jsonl.zst").write_bytes(b"x" * (k + 1))
    for name in extra:
        (d / name).write_bytes(b"{}")
    return d


def names(shards) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.name for s in shards]


# --------------------------------------------------------------------------
# specs


@pytest.mark.parametrize(
    "spec,bins",
    [
        ("9-10", {9, 10}),
        ("8,9,10", {8, 9, 10}),
        ("10", {10}),
        ("0", {0}),
        ("5-7,10", {5, 6, 7, 10}),
        (" 9 - 10 ", {9, 10}),
    ],
)
def test_parse_wds(spec: str, bins: set[int]) -> None:
    assert parse_wds(spec) == frozenset(bins)


@pytest.mark.parametrize("spec", ["", "ten", "10-9", "11", "-1", "9-", "9,,10", "9.5", "1-12"])
def test_parse_wds_rejects_and_names_the_spec(spec: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_wds(spec)
    assert repr(spec) in str(err.value)


def test_parse_sources() -> None:
    assert parse_sources("cc,ia") == {"cc", "ia"}
    assert parse_sources("ab") == {"ab"}
    for bad in ("", "cc,xx", "CC", "cc,"):
        with pytest.raises(ValueError) as err:
            parse_sources(bad)
        assert repr(bad) in str(err.value)


# --------------------------------------------------------------------------
# local layouts


def test_v4_english_layout_order_and_fields(tmp_path: Path) -> None:
    root = tmp_path / "4.0" / "clean"
    d = layout(
        root, "eng_Latn", V4_ENGLISH, extra=[".8_30.ia.filter.json", ".filter.json", "counts.json", ".9_1.cc.jsonl.zst"]
    )
    shards = find_shards("eng_Latn", corpus="v4", local_root=root)
    # (bin, n, src) ascending, numerically: 9_2 before 9_10, every 9 before 10.
    assert names(shards) == [
        "1_1.cc",
        "5_3.cc",
        "8_30.ia",
        "9_1.ab",
        "9_1.cc",
        "9_1.ia",
        "9_2.cc",
        "9_10.cc",
        "10_1.cc",
    ]
    s = shards[2]
    path = d / "8_30.ia.jsonl.zst"
    assert s.location == str(path) and os.path.isabs(s.location)
    assert s.size == path.stat().st_size and s.mtime == int(path.stat().st_mtime)
    assert s.source_id == "hplt-v4/clean/eng_Latn/8_30.ia"


def test_order_does_not_depend_on_listing(tmp_path: Path) -> None:
    a = find_shards("eng_Latn", corpus="v4", local_root=layout(tmp_path / "a" / "clean", "eng_Latn", V4_ENGLISH).parent)
    b = find_shards(
        "eng_Latn", corpus="v4", local_root=layout(tmp_path / "b" / "clean", "eng_Latn", V4_ENGLISH[::-1]).parent
    )
    assert names(a) == names(b)


def test_v3_layout(tmp_path: Path) -> None:
    root = tmp_path / "3.0" / "sorted"
    layout(root, "fin_Latn", V3_NAMES)
    shards = find_shards("fin_Latn", corpus="v3", local_root=root)
    assert names(shards) == ["1_1", "1_2", "5_1", "9_1", "9_2", "9_103", "10_1"]
    assert shards[-1].source_id == "hplt-v3/sorted/fin_Latn/10_1"


def test_subset_is_the_root_name(tmp_path: Path) -> None:
    root = tmp_path / "noisy"
    layout(root, "deu_Latn", ["3_1"])
    assert find_shards("deu_Latn", corpus="v4", local_root=root)[0].source_id == "hplt-v4/noisy/deu_Latn/3_1"


@pytest.mark.parametrize("lang,corpus,listed", [("eng_Latn", "v4", V4_ENGLISH), ("fin_Latn", "v3", V3_NAMES)])
def test_wds_1_never_selects_10(tmp_path: Path, lang: str, corpus: str, listed: list[str]) -> None:
    root = tmp_path / "clean"
    layout(root, lang, listed)
    got = names(find_shards(lang, corpus=corpus, local_root=root, wds="1"))
    assert got and all(n.startswith("1_") for n in got)
    got10 = names(find_shards(lang, corpus=corpus, local_root=root, wds="10"))
    assert got10 and all(n.startswith("10_") for n in got10)


def test_wds_ranges_and_lists(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    layout(root, "eng_Latn", V4_ENGLISH)
    assert names(find_shards("eng_Latn", corpus="v4", local_root=root, wds="9-10")) == [
        "9_1.ab",
        "9_1.cc",
        "9_1.ia",
        "9_2.cc",
        "9_10.cc",
        "10_1.cc",
    ]
    assert names(find_shards("eng_Latn", corpus="v4", local_root=root, wds="5,8")) == ["5_3.cc", "8_30.ia"]



def test_a_selection_that_matches_nothing_names_the_bins_present(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    layout(root, "eng_Latn", V4_ENGLISH)
    with pytest.raises(InputError, match=r"WDS bins 1,5,8,9,10, sources ab,cc,ia\)"):
        find_shards("eng_Latn", corpus="v4", local_root=root, wds="4")


def test_a_local_root_one_level_too_high_is_told_the_folder_below(tmp_path: Path) -> None:
    layout(tmp_path / "4.0" / "clean", "eng_Latn", V4_ENGLISH)
    with pytest.raises(InputError, match=f"did you mean --local-root {tmp_path / '4.0' / 'clean'}\\?"):
        find_shards("eng_Latn", corpus="v4", local_root=tmp_path / "4.0")

def test_sources_select_by_tag(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    layout(root, "eng_Latn", V4_ENGLISH)
    assert names(find_shards("eng_Latn", corpus="v4", local_root=root, sources="ia,ab")) == [
        "8_30.ia",
        "9_1.ab",
        "9_1.ia",
    ]
    assert names(find_shards("eng_Latn", corpus="v4", local_root=root, sources="cc", wds="9")) == [
        "9_1.cc",
        "9_2.cc",
        "9_10.cc",
    ]


def test_sources_on_names_without_tag_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "sorted"
    d = layout(root, "fin_Latn", V3_NAMES)
    with pytest.raises(InputError) as err:
        find_shards("fin_Latn", corpus="v3", local_root=root, sources="cc")
    assert "--sources cc" in str(err.value) and str(d) in str(err.value)


def test_generic_names_only_without_wds(tmp_path: Path) -> None:
    root = tmp_path / "mycorpus"
    layout(root, "fin_Latn", ["part-0002", "part-0010", "part-0001", "9_1"])
    assert names(find_shards("fin_Latn", corpus="v3", local_root=root)) == [
        "9_1",
        "part-0001",
        "part-0002",
        "part-0010",
    ]
    # --wds cannot classify part-*: an unfiltered run reads them, so they are named, not dropped
    with pytest.raises(InputError, match=r"3 files it cannot classify: part-0001.jsonl.zst, part-0002"):
        find_shards("fin_Latn", corpus="v3", local_root=root, wds="9")
    # not an HPLT subset folder: a corpus of its own, no hplt- prefix (input/identity.py)
    assert find_shards("fin_Latn", corpus="v3", local_root=root)[1].source_id == "mycorpus/fin_Latn/part-0001"


def test_unknown_language_names_the_path(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    layout(root, "eng_Latn", V4_ENGLISH)
    layout(root, "fin_Latn", ["9_1"])
    with pytest.raises(InputError) as err:
        find_shards("fin_Latm", corpus="v4", local_root=root)
    msg = str(err.value)
    assert str(root / "fin_Latm") in msg and "fin_Latn" in msg  # names the path and suggests the near miss


def test_missing_root_names_the_path(tmp_path: Path) -> None:
    root = tmp_path / "nowhere" / "clean"
    with pytest.raises(InputError) as err:
        find_shards("eng_Latn", corpus="v4", local_root=root)
    assert str(root) in str(err.value)


def test_empty_selection_names_dir_and_filter(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    d = layout(root, "eng_Latn", V4_ENGLISH)
    with pytest.raises(InputError) as err:
        find_shards("eng_Latn", corpus="v4", local_root=root, wds="7", sources="ab")
    msg = str(err.value)
    assert str(d) in msg and "--wds 7" in msg and "--sources ab" in msg


def test_language_dir_without_shards(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    d = layout(root, "eng_Latn", [], extra=[".filter.json", "counts.json"])
    with pytest.raises(InputError) as err:
        find_shards("eng_Latn", corpus="v4", local_root=root)
    assert str(d) in str(err.value)


def test_bad_arguments(tmp_path: Path) -> None:
    root = tmp_path / "clean"
    layout(root, "eng_Latn", V4_ENGLISH)
    with pytest.raises(ValueError, match="corpus"):
        find_shards("eng_Latn", corpus="v2", local_root=root)
    with pytest.raises(ValueError, match="'9-x'"):
        find_shards("eng_Latn", corpus="v4", local_root=root, wds="9-x")
    with pytest.raises(InputError):
        find_shards("../eng_Latn", corpus="v4", local_root=root)
    with pytest.raises(InputError, match="local root"):
        find_shards("eng_Latn", corpus="v4", local_root=None)


# --------------------------------------------------------------------------
# v3 over HTTP (a server on 127.0.0.1; nothing reaches the internet)


@pytest.fixture
def map_server(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    files: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # shutdown() waits one poll
    base = f"http://127.0.0.1:{server.server_address[1]}/three/sorted"
    yield base, files, seen
    server.shutdown()
    server.server_close()


def test_v3_map_over_http(map_server) -> None:  # type: ignore[no-untyped-def]
    base, files, seen = map_server
    urls = [f"{base}/fin_Latn/{n}.jsonl.zst" for n in V3_NAMES]
    files["/three/sorted/fin_Latn.map"] = ("\n".join(urls[::-1]) + "\n\n").encode()
    shards = find_shards("fin_Latn", corpus="v3", local_root=None, base_url=base + "/")
    assert names(shards) == ["1_1", "1_2", "5_1", "9_1", "9_2", "9_103", "10_1"]
    s = shards[-1]
    assert s.location == f"{base}/fin_Latn/10_1.jsonl.zst" and s.size is None and s.mtime is None
    assert s.source_id == "hplt-v3/sorted/fin_Latn/10_1"
    assert names(find_shards("fin_Latn", corpus="v3", local_root=None, base_url=base, wds="1")) == ["1_1", "1_2"]
    assert seen == ["/three/sorted/fin_Latn.map"] * 2  # only the map is fetched, never a shard


def test_v3_unknown_language_names_the_url(map_server) -> None:  # type: ignore[no-untyped-def]
    base, _, _ = map_server
    with pytest.raises(InputError) as err:
        find_shards("xxx_Latn", corpus="v3", local_root=None, base_url=base)
    assert f"{base}/xxx_Latn.map" in str(err.value)


def test_v3_http_empty_selection_names_map_and_filter(map_server) -> None:  # type: ignore[no-untyped-def]
    base, files, _ = map_server
    files["/three/sorted/fin_Latn.map"] = f"{base}/fin_Latn/9_1.jsonl.zst\n".encode()
    with pytest.raises(InputError) as err:
        find_shards("fin_Latn", corpus="v3", local_root=None, base_url=base, wds="10")
    assert f"{base}/fin_Latn.map" in str(err.value) and "--wds 10" in str(err.value)


def test_v3_map_with_a_bad_line(map_server) -> None:  # type: ignore[no-untyped-def]
    base, files, _ = map_server
    files["/three/sorted/fin_Latn.map"] = f"{base}/fin_Latn/9_1.jsonl.zst\n<html>oops</html>\n".encode()
    with pytest.raises(InputError, match="line 2"):
        find_shards("fin_Latn", corpus="v3", local_root=None, base_url=base)


def test_local_root_wins_over_base_url(tmp_path: Path, map_server) -> None:  # type: ignore[no-untyped-def]
    base, _, seen = map_server
    root = tmp_path / "sorted"
    layout(root, "fin_Latn", ["9_1"])
    shards = find_shards("fin_Latn", corpus="v3", local_root=root, base_url=base)
    assert shards[0].location == str(root / "fin_Latn" / "9_1.jsonl.zst") and seen == []
