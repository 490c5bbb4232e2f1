"""Bad input through the whole pipeline: a named error (file, line, reason) or a counted, kept quarantine.

Read = kept + quarantined is checked in validation.json for every input shard.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import orjson
import pytest
import zstandard

from shard_pipeline.contract.shard import read_shards
from tests.pipeline_util import lang_dir, LANG, records, run_cli, tree_bytes, write_records

pytestmark = pytest.mark.slow  # end-to-end: every test runs the pipeline

GOOD = 6  # good records around each bad one


def corpus_with(tmp_path: Path, bad_line: bytes, *, before: int = 3) -> Path:
    recs = records(GOOD, seed=11, text_bytes=200)
    lines = [orjson.dumps(r) for r in recs[:before]] + [bad_line] + [orjson.dumps(r) for r in recs[before:]]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", lines)
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", records(4, seed=12, text_bytes=200))
    return tmp_path / "clean"


def good(**changes) -> bytes:
    rec = records(1, seed=99)[0]
    rec.update(changes)
    for k in [k for k, v in changes.items() if v is _DROP]:
        del rec[k]
    return orjson.dumps(rec)


_DROP = object()

# record-level kinds: (name, the bad line, the reason the reader gives)
RECORD_KINDS = [
    ("not_json", b'{"id": "x", "text": ', "not_json"),
    ("json_array", b'["id", "text"]', "not_object"),
    ("invalid_utf8", good(text="caf\u00e9").replace("caf\u00e9".encode(), b"caf\xe9"), "invalid_utf8"),
    ("lone_surrogate", good(text="PLACEHOLDER").replace(b"PLACEHOLDER", b"\\udcff"), "lone_surrogate"),
    ("missing_id", good(id=_DROP), "missing_id"),
    ("missing_text", good(text=_DROP), "missing_text"),
    ("missing_u", good(u=_DROP), "missing_u"),
    ("text_not_string", good(text=42), "text_not_string"),
    ("id_with_newline", good(id="abc\ndef"), "bad_id"),
    ("id_with_nul", good(id="abc\x00def"), "bad_id"),
]


@pytest.mark.parametrize("name,line,reason", RECORD_KINDS, ids=[k[0] for k in RECORD_KINDS])
def test_bad_record_fails_naming_file_line_and_reason(tmp_path, capsys, name, line, reason):
    root = corpus_with(tmp_path, line)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run") == 1
    err = capsys.readouterr().err
    assert "9_1.jsonl.zst:4" in err and reason in err, err
    assert not out.exists()


def test_every_bad_record_kind_quarantined_counted_and_kept(tmp_path):
    recs = records(30, seed=13, text_bytes=200)
    lines = [orjson.dumps(r) for r in recs]
    where = {}
    for k, (name, line, reason) in enumerate(RECORD_KINDS):
        pos = 2 * k + 1
        lines.insert(pos, line)
        where[name] = (pos + 1, reason)
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", lines)
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", records(5, seed=14, text_bytes=200))
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(tmp_path / "clean", out, run_dir, "--bad-records", "quarantine", "--shard-rows", "10") == 0
    validation = json.loads((lang_dir(run_dir) / "validation.json").read_text())
    for inp in validation["inputs"]:
        assert inp["read"] == inp["kept"] + sum(inp["quarantined"].values())
    first = next(i for i in validation["inputs"] if i["name"] == "9_1")
    assert first["read"] == 30 + len(RECORD_KINDS) and first["kept"] == 30
    expected_counts: dict[str, int] = {}
    for _, reason in where.values():
        expected_counts[reason] = expected_counts.get(reason, 0) + 1
    assert first["quarantined"] == expected_counts
    # kept verbatim with source and line
    kept = [json.loads(l) for p in (lang_dir(run_dir) / "quarantine").iterdir() for l in p.read_text().splitlines()]
    assert sorted((q["line"], q["reason"]) for q in kept) == sorted(where.values())
    raw_lines = {q["line"]: q["raw"] for q in kept}
    assert raw_lines[where["not_json"][0]] == '{"id": "x", "text": '
    assert raw_lines[where["invalid_utf8"][0]] == {"base64": __import__("base64").b64encode(RECORD_KINDS[2][1]).decode()}
    # the manifest counts them, and the output holds exactly the good documents
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    assert manifest["counts"]["filters"] == {f"bad_record:{k}": v for k, v in sorted(expected_counts.items())}
    assert manifest["rows"] == 35 and len(list(read_shards(out))) == 35


def _zst(lines: list[bytes]) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(b"".join(l + b"\n" for l in lines))


def _stream_cases() -> list[tuple[str, bytes, str]]:
    body = _zst([orjson.dumps(r) for r in records(40, seed=15, text_bytes=500)])
    corrupt = bytearray(body)
    for k in range(len(corrupt) // 2, len(corrupt) // 2 + 40):
        corrupt[k] ^= 0x5A
    return [
        ("truncated_zstd", body[: len(body) * 2 // 3], "truncated"),
        ("corrupt_frame", bytes(corrupt), "corrupt"),
        ("not_zstd", b"this is plain text, not zstd\n" * 10, "not_zstd"),
        ("empty_file", b"", "empty_file"),
    ]


@pytest.mark.parametrize("mode", ["fail", "quarantine"])
@pytest.mark.parametrize("name,data,reason", _stream_cases(), ids=[c[0] for c in _stream_cases()])
def test_broken_stream_is_an_error_in_both_modes(tmp_path, capsys, name, data, reason, mode):
    """What cannot be read cannot be counted: a broken stream fails the run whatever the policy."""
    shard = tmp_path / "clean" / LANG / "9_1.jsonl.zst"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(data)
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", records(4, seed=16))
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--bad-records", mode) == 1
    err = capsys.readouterr().err
    assert "9_1.jsonl.zst" in err and reason in err, err
    assert not out.exists()


def test_repeated_id_within_a_file(tmp_path, capsys):
    recs = records(12, seed=17)
    recs[9]["id"] = recs[4]["id"]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs)
    assert run_cli(tmp_path / "clean", tmp_path / "out", tmp_path / "run", "--bad-records", "quarantine") == 1
    err = capsys.readouterr().err
    assert "repeated document id" in err and "9_1.jsonl.zst:5" in err and "9_1.jsonl.zst:10" in err


def test_a_200_mb_document_goes_through(tmp_path):
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma", "delta", "épsilon", "ζeta"]
    big = " ".join(rng.choice(words) for _ in range(3_000_000))
    big = (big * (200_000_000 // len(big.encode()) + 1))[: 200_000_000]
    recs = records(5, seed=18, text_bytes=300)
    recs[2]["text"] = big
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs)
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--shard-rows", "2") == 0
    docs = {d.id: d for d in read_shards(out)}
    assert docs[recs[2]["id"]].text == big and len(docs) == 5
    files = tree_bytes(out)
    assert len(files) == 4


def test_after_a_bad_record_both_printed_commands_run_as_written(tmp_path, capsys):
    """#21: --resume cannot pass a bad record, so the next step names the two new runs that can, exactly."""
    import shlex

    from shard_pipeline.submit import cli

    root = corpus_with(tmp_path, b'{"id": "x", "text": ')
    out, run = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run) == 1
    err = capsys.readouterr().err
    assert cli.main(["--status", str(run)]) == 1
    status = capsys.readouterr().out
    assert "fix the cause, then" not in status
    commands = [l.strip() for l in status.splitlines() if l.strip().startswith("./hplt-shard ")]
    assert len(commands) == 2 and all(c in err for c in commands)  # the run and --status say the same
    fixed, quarantined = (shlex.split(c)[1:] for c in commands)
    assert "9_1.jsonl.zst:4: not_json" in status and "--bad-records quarantine" not in " ".join(fixed)
    assert quarantined[-4:] == ["--bad-records", "quarantine", "--run-dir", str(tmp_path / "run-quarantine")]
    assert cli.main(["--resume", str(run), "--bad-records", "quarantine"]) == 2  # what the old message led to
    capsys.readouterr()
    assert cli.main(quarantined) == 0
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == GOOD + 4  # the bad line set aside:
    assert any(p.stat().st_size for p in (lang_dir(tmp_path / "run-quarantine") / "quarantine").iterdir())  # kept verbatim
    recs = records(GOOD, seed=11, text_bytes=200)
    write_records(root / LANG / "9_1.jsonl.zst", [orjson.dumps(r) for r in recs])  # the input, fixed
    # the quarantine run counted the file with its bad line: the fixed file is smaller than the counts index knows
    # it, which a run accepts only with the explicit word (input/index_check.py)
    assert cli.main(fixed) == 2 and "--release-changed" in capsys.readouterr().err
    assert cli.main([*fixed, "--release-changed"]) == 0
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == GOOD + 4
