"""shard_pipeline.stages.clean_policy: the quarantine rules, their thresholds, and that normal text passes."""
from __future__ import annotations

import functools
import itertools
import random
import re
import string
from dataclasses import fields

import pytest

from shard_pipeline.input import synth
from shard_pipeline.stages import clean_policy as clean
from shard_pipeline.stages.clean_policy import (
    CONF_KEYS,
    REASONS,
    CleanPolicy,
    quarantine_reasons,
    summary,
)

DEFAULT = CleanPolicy()
_CTRL_CHARS = frozenset(chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_B64 = string.ascii_letters + string.digits + "+/="


def reasons(text: str, policy: CleanPolicy = DEFAULT) -> tuple[str, ...]:
    raw = text.encode("utf-8", "surrogatepass")
    got = quarantine_reasons(text, len(raw), policy)
    assert quarantine_reasons(text, len(raw), policy, utf8=raw) == got
    return got


def reference(text: str, p: CleanPolicy) -> tuple[str, ...]:
    """The module docstring's table, one rule at a time, per character, as slowly as it reads."""
    raw = text.encode("utf-8", "surrogatepass")
    B, n = len(raw), len(text)
    all_lines = text.split("\n")
    lines = [line for line in all_lines if line]
    runs = [len(list(g)) for _, g in itertools.groupby(text)]
    b64_runs = [len(m.group()) for m in re.finditer(r"[A-Za-z0-9+/=]+", text)]
    fffd = text.count("\ufffd")
    checks = {
        "max_bytes": B > p.max_bytes,
        "repeated_lines": len(lines) >= p.repeated_lines_min_lines
        and len(set(lines)) <= p.repeated_lines_max_unique_ratio * len(lines),
        "one_line": B >= p.one_line_min_bytes
        and max(len(line.encode("utf-8", "surrogatepass")) for line in all_lines) >= p.one_line_share * B,
        "control_chars": sum(c in _CTRL_CHARS for c in text) > p.control_char_ratio * n,
        "char_run": max(runs, default=0) > p.max_char_run,
        "replacement_chars": fffd >= p.replacement_min_chars and fffd > p.replacement_ratio * n,
        "whitespace_padding": n >= p.whitespace_min_chars
        and sum(c.isspace() for c in text) > p.whitespace_ratio * n
        and sum(c.isalnum() for c in text) < p.alnum_ratio_below * n,
        "base64_blob": max(b64_runs, default=0) >= p.base64_min_run,
    }
    assert list(checks) == list(REASONS)
    return tuple(r for r, hit in checks.items() if hit)


_rng = random.Random(0)
_WORDS = ["".join(_rng.choice(string.ascii_lowercase) for _ in range(_rng.randint(2, 9))) for _ in range(5000)]


@functools.lru_cache(maxsize=None)
def prose(n_chars: int, seed: int = 0) -> str:
    """ASCII prose of exactly n_chars, no newline: short random words and single spaces."""
    rng = random.Random(seed)
    text = ""
    while len(text) < n_chars:
        text += " ".join(rng.choices(_WORDS, k=n_chars // 5 + 10)) + " "
    return text[:n_chars]


def prose_lines(n_chars: int, seed: int = 1, width: int = 60) -> str:
    """Prose of exactly n_chars cut into distinct lines of about `width` characters."""
    flat = prose(n_chars, seed)
    return "\n".join(flat[i : i + width - 1] for i in range(0, len(flat), width))[:n_chars]


# ---------------------------------------------------------------- normal text passes

CHINESE = [
    "互联网是全球性的计算机网络系统，通过标准的通信协议将数十亿台设备连接起来。",
    "它承载着大量的信息资源和服务，例如万维网的超文本文档、电子邮件、电话以及文件共享。",
    "今天，我们在网上阅读新闻、学习课程、购买商品，也与远方的朋友交流。",
    "“数据中心”的能耗问题越来越受到关注（见第３章）。",
]
JAPANESE = [
    "インターネットは、世界中のコンピュータネットワークを相互に接続した巨大なネットワークです。",
    "私たちは毎日、ニュースを読んだり、買い物をしたり、友だちと連絡を取ったりしています。",
    "　東京の天気は晴れ、最高気温は二十五度の予想です。",
    "「ありがとうございます」と彼女は言った。",
]
THAI = [
    "อินเทอร์เน็ตเป็นเครือข่ายคอมพิวเตอร์ขนาดใหญ่ที่เชื่อมต่อกันทั่วโลก",
    "และให้บริการข้อมูลมากมายแก่ผู้ใช้งานทุกคน",
    "วันนี้อากาศดีมาก",
]
ARABIC = [
    "الإنترنت هو شبكة اتصالات عالمية تربط ملايين الحواسيب حول العالم،",
    "وتقدم خدمات كثيرة مثل البريد الإلكتروني والتعليم عن بعد.",
    "نشرت الصحيفة تقريراً جديداً يوم الأحد.",
]
RUSSIAN = [
    "Интернет — всемирная система объединённых компьютерных сетей для хранения и передачи информации.",
    "Сегодня в Москве солнечно, температура до +25 °C.",
    "«Спасибо», — ответила она.",
]


def varied(sentences: list[str], n_lines: int, seed: int = 0) -> str:
    """Lines of two to four of the sentences in random order plus a number: distinct lines."""
    rng = random.Random(seed)
    return "\n".join("".join(rng.choices(sentences, k=rng.randint(2, 4))) + f" {i}" for i in range(n_lines))
CODE = '''\
function render(items) {
    const out = [];
    for (const item of items) {
        if (!item.visible) {
            continue;
        }
        out.push(`<li class="item">${item.title}</li>`);
    }
    return out.join("\\n");
}

'''


def realistic_documents() -> list[tuple[str, str]]:
    rng = random.Random(4)
    docs = [(f"synth {size}", synth._text(rng, size)) for size in (40, 300, 3000, 12_000, 60_000, 250_000, 1_300_000)]
    docs.append(("synth with e-mail", synth._with_pii(synth._text(rng, 3000), random.Random(0))[0]))
    docs += [
        ("chinese, 30k chars", varied(CHINESE, 300)),
        ("japanese, 20k chars", varied(JAPANESE, 250)),
        ("thai, no spaces", varied(THAI, 150)),
        ("thai, one 100k-char paragraph", "".join(random.Random(2).choices(THAI, k=2000))),
        ("arabic", varied(ARABIC, 250)),
        ("russian", varied(RUSSIAN, 250)),
        ("javascript, 300+ lines", "".join(CODE.replace("render", f"render{i}") for i in range(30))),
        (
            "list page: a 'Read more' line between distinct titles",
            "\n".join(f"{i}. {prose(40, i)}\nRead more\n" for i in range(300)),
        ),
        (
            "markdown table",
            "| id | name | price |\n|---|---|---|\n" + "\n".join(f"| {i} | {prose(12, i)} | {i * 3}.99 € |" for i in range(400)),
        ),
        (
            "poem with a refrain, 400 lines",
            "\n".join(prose(50, i) if i % 3 else "and the river keeps on running" for i in range(400)),
        ),
        ("separator rule and headings", "Title\n" + "=" * 80 + "\n" + prose_lines(5000) + "\n" + "-" * 200 + "\n" + prose_lines(3000, 2)),
        ("small inline image", prose(2000) + ' <img src="data:image/png;base64,' + "".join(random.Random(1).choice(_B64) for _ in range(5000)) + '"> ' + prose(500)),
        ("a few damaged characters", prose(1500) + " caf\ufffd na\ufffdve " + prose(1500, 3) + " \ufffd\ufffd\ufffd"),
        ("tabs and a form feed", "\t".join(prose(30, i) for i in range(100)) + "\f" + prose(400)),
        ("indented layout text, 40% spaces", "\n".join("      " + prose(12, i) + "          " for i in range(700))),
        ("nbsp-heavy page", "\xa0".join(prose(9, i) for i in range(3000))),
        ("empty", ""),
        ("one word", "hello"),
    ]
    return docs


@pytest.mark.parametrize("name,text", realistic_documents(), ids=[n for n, _ in realistic_documents()])
def test_normal_documents_pass(name, text):
    assert reasons(text) == ()
    if len(text) < 300_000:
        assert reference(text, DEFAULT) == ()


def test_synthetic_corpus_passes():
    rng = random.Random(11)
    for i in range(300):
        text = synth._text(rng, int(rng.lognormvariate(7.6, 1.0)) + 20)
        assert reasons(text) == (), i


# ---------------------------------------------------------------- each rule, and its near miss


def test_reasons_order():
    assert REASONS == (
        "max_bytes",
        "repeated_lines",
        "one_line",
        "control_chars",
        "char_run",
        "replacement_chars",
        "whitespace_padding",
        "base64_blob",
    )


def test_max_bytes():
    policy = CleanPolicy(max_bytes=100)
    assert reasons("é" * 50, policy) == ()  # 100 bytes
    assert reasons("é" * 50 + "a", policy) == ("max_bytes",)
    assert DEFAULT.max_bytes == 64 * 1024 * 1024


def test_repeated_lines():
    assert reasons("\n".join(f"line {i % 20}" for i in range(200))) == ("repeated_lines",)  # 20 <= 0.1 * 200
    assert reasons("\n".join(f"line {i % 21}" for i in range(200))) == ()  # 21 distinct
    assert reasons("\n".join("same line" for _ in range(199))) == ()  # 199 lines: too short to judge
    assert reasons("\n".join("same line" for _ in range(200))) == ("repeated_lines",)
    # blank lines are not lines: 199 non-empty lines among many blank ones
    assert reasons("\n\n\n".join("same line" for _ in range(199)) + "\n" * 500) == ()
    assert reasons("\n\n\n".join("same line" for _ in range(200)) + "\n" * 500) == ("repeated_lines",)


def test_one_line():
    # 1,000,000 bytes, the longest line 950,000 of them (>= 0.95): quarantined; 949,999: kept
    for long, expected in ((950_000, ("one_line",)), (949_999, ())):
        text = prose(long) + "\n" + prose_lines(1_000_000 - long - 1)
        assert len(text.encode()) == 1_000_000
        assert reasons(text) == expected
    assert reasons(prose(999_999)) == ()  # one line, but under 1,000,000 bytes
    assert reasons(prose(1_000_000)) == ("one_line",)
    # the share is of UTF-8 bytes: the long line has 950,001 of 1,000,001 bytes but only 92.7 %
    # of the characters
    text = "éa" * 316_667 + "\n" + prose_lines(49_999)
    assert len(text.encode()) == 1_000_001
    assert reasons(text) == ("one_line",)


def test_control_chars():
    assert reasons(prose(989) + "\x00" * 11) == ("control_chars",)  # 11 > 0.01 * 1000
    assert reasons(prose(990) + "\x01" * 10) == ()  # 10 is not > 10
    assert reasons(prose(989) + "\x7f" * 11) == ("control_chars",)  # DEL counts
    assert reasons(prose(989) + "\x1b[0m" * 11) == ("control_chars",)  # ANSI escapes, 11 ESC in 1033 chars
    assert reasons(prose(700) + "\x0b\x0c" * 6) == ("control_chars",)  # VT and FF count
    assert reasons(prose(700) + "\t\r\n" * 100) == ()  # tab, CR and newline never count
    assert reasons(prose(700) + "\x85" * 50) == ()  # C1 controls are not counted (mojibake is not this rule)


def test_char_run():
    assert reasons(prose(3000) + "x" * 10_001 + prose(3000, 2)) == ("char_run",)
    assert reasons(prose(3000) + "x" * 10_000 + prose(3000, 2)) == ()
    # wherever the run sits relative to the probe positions (multiples of 10,001)
    for offset in (0, 1, 9_999, 10_000, 10_001, 10_002, 20_001, 25_000):
        for length, expected in ((10_001, ("char_run",)), (10_000, ())):
            text = prose(offset) + "é" * length + prose(30_000 - offset, 5)
            assert reasons(text) == expected, (offset, length)
    assert reasons("x" * 10_000 + "y" * 10_000) == ()  # two runs of 10,000 each
    assert reasons(prose(100) + "-" * 10_001) == ("char_run",)  # at the very end


def test_char_run_matches_a_regex_for_any_threshold():
    rng = random.Random(5)
    for _ in range(400):
        need = rng.choice([2, 3, 65, 66, 100, 257])
        parts = []
        for _ in range(rng.randint(0, 8)):
            c = rng.choice("ab é中\n")
            parts.append(c * rng.choice([1, 2, need - 2, need - 1, need, need + 1, 3 * need]))
            parts.append(prose(rng.randint(0, 2 * need), rng.randint(0, 99)))
        text = "".join(parts)
        expected = re.search(r"(.)\1{%d}" % (need - 1), text, re.DOTALL) is not None
        assert clean._has_char_run(text, need) == expected


def test_replacement_chars():
    assert reasons(prose(9_899) + "\ufffd" * 100) == ("replacement_chars",)  # 100 > 0.01 * 9,999
    assert reasons(prose(9_900) + "\ufffd" * 100) == ()  # 100 is not > 100
    assert reasons(prose(5_000) + "\ufffd" * 99) == ()  # 99 < 100 of them, though > 1 %
    assert reasons("".join(prose(20, i) + "\ufffd" * 5 for i in range(40))) == ("replacement_chars",)


def _padding(ws: int, alnum: int, other: int, *, space: str = " \t", letters: str = "abc123", punct: str = ".,;") -> str:
    rng = random.Random(ws * 7 + alnum)
    chars = [rng.choice(space) for _ in range(ws)] + [rng.choice(letters) for _ in range(alnum)] + [rng.choice(punct) for _ in range(other)]
    rng.shuffle(chars)
    return "".join(chars)


def test_whitespace_padding():
    assert reasons(_padding(5_001, 1_999, 3_000)) == ("whitespace_padding",)
    assert reasons(_padding(5_000, 1_999, 3_001)) == ()  # whitespace not > 50 %
    assert reasons(_padding(5_001, 2_000, 2_999)) == ()  # letters/digits not < 20 %
    assert reasons(_padding(5_000, 1_999, 3_000)) == ()  # 9,999 characters: too short to judge
    # non-ASCII whitespace (ideographic space, NBSP, em space) and CJK letters count the same
    cjk = _padding(5_001, 1_999, 3_000, space="\u3000\xa0\u2003\n", letters="中文字", punct="。、「")
    assert reasons(cjk) == ("whitespace_padding",)
    cjk = _padding(5_000, 1_999, 3_001, space="\u3000\xa0\u2003\n", letters="中文字", punct="。、「")
    assert reasons(cjk) == ()


def test_space_bound_covers_every_whitespace_character():
    # the upper bound's premise: non-ASCII whitespace has lead byte C2, E1 or E2, or is E3 80 80
    for cp in range(0x80, 0x110000):
        ch = chr(cp)
        if ch.isspace():
            enc = ch.encode()
            assert enc[0] in (0xC2, 0xE1, 0xE2) or enc[:2] == b"\xe3\x80", hex(cp)
            assert cp < 0x3001
    import numpy as np

    everything = "".join(chr(c) for c in range(0x3100) if not 0xD800 <= c < 0xE000)
    arr = np.frombuffer(everything.encode(), dtype=np.uint8)
    exact = sum(c.isspace() for c in everything)
    assert clean._count_space(everything) == exact
    assert clean._space_bound(arr, False) >= exact


def test_alnum_regex_is_str_isalnum():
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert clean._NOT_ALNUM_RUN.sub("", everything) == "".join(c for c in everything if c.isalnum())


def test_base64_blob():
    rng = random.Random(9)
    blob = "".join(rng.choice(_B64) for _ in range(100_000))
    assert reasons(prose(500) + " " + blob + " " + prose(500, 2)) == ("base64_blob",)
    assert reasons(prose(500) + " " + blob[:-1] + " " + prose(500, 2)) == ()
    assert reasons(blob[:50_000] + " " + blob[50_000:]) == ()  # broken by whitespace
    assert reasons(blob[:50_000] + "é" + blob[50_000:]) == ()  # or by any other character
    assert reasons(blob) == ("base64_blob",)
    assert reasons('<img src="data:image/png;base64,' + blob + '">') == ("base64_blob",)
    for offset in (0, 1, 99_999, 100_000, 100_001, 150_000):
        text = prose(offset).replace(" ", "-") + "-" + blob + "-" + prose(1000, 3).replace(" ", "-")
        assert reasons(text) == ("base64_blob",), offset


def test_several_reasons_in_order():
    assert reasons("\x00" * 20_000) == ("control_chars", "char_run")
    assert reasons("A" * 1_100_000) == ("one_line", "char_run", "base64_blob")
    small = CleanPolicy(max_bytes=1000)
    text = "\n".join("\x01\x01 same \ufffd" for _ in range(300))
    assert reasons(text, small) == ("max_bytes", "repeated_lines", "control_chars", "replacement_chars")
    assert reference(text, small) == ("max_bytes", "repeated_lines", "control_chars", "replacement_chars")


# ---------------------------------------------------------------- against the reference

TINY = CleanPolicy(
    max_bytes=400,
    repeated_lines_min_lines=8,
    repeated_lines_max_unique_ratio=0.3,
    one_line_min_bytes=150,
    one_line_share=0.6,
    control_char_ratio=0.02,
    max_char_run=70,
    replacement_ratio=0.02,
    replacement_min_chars=3,
    whitespace_min_chars=60,
    whitespace_ratio=0.4,
    alnum_ratio_below=0.3,
    base64_min_run=80,
)
PIECES = [
    lambda r: prose(r.randint(1, 60), r.randint(0, 999)),
    lambda r: "\n",
    lambda r: "\n" * r.randint(2, 5),
    lambda r: "same line\n" * r.randint(1, 12),
    lambda r: r.choice(sorted(_CTRL_CHARS)) * r.randint(1, 6),
    lambda r: "\ufffd" * r.randint(1, 5),
    lambda r: r.choice(" \t\xa0\u3000\u2003\u2028") * r.randint(1, 40),
    lambda r: r.choice("x中😀-") * r.randint(1, 90),
    lambda r: "".join(r.choice(_B64) for _ in range(r.randint(1, 100))),
    lambda r: "。、「」中文ｶﾀｶナかな",
    lambda r: "é" * r.randint(1, 30),
]


def test_matches_the_reference_on_random_documents():
    rng = random.Random(2026)
    seen = set()
    for policy in (TINY, CleanPolicy(max_char_run=5, base64_min_run=20, whitespace_min_chars=30, one_line_min_bytes=100)):
        for _ in range(1500):
            text = "".join(rng.choice(PIECES)(rng) for _ in range(rng.randint(0, 14)))
            expected = reference(text, policy)
            assert reasons(text, policy) == expected, text
            seen.update(expected)
    assert seen == set(REASONS)  # every rule fired at least once, and agreed


def test_text_bytes_must_match():
    with pytest.raises(ValueError):
        quarantine_reasons("é", 1, DEFAULT)
    with pytest.raises(ValueError):
        quarantine_reasons("abc", 4, DEFAULT, utf8=b"abc")


# ---------------------------------------------------------------- policy and conf


def test_policy_json_and_validation():
    js = DEFAULT.to_json()
    assert list(js) == [f.name for f in fields(CleanPolicy)]
    assert js["max_bytes"] == 67_108_864 and js["max_char_run"] == 10_000 and js["one_line_share"] == 0.95
    assert CleanPolicy(**js) == DEFAULT
    for bad in (dict(max_bytes=0), dict(max_char_run=-1), dict(max_bytes=True), dict(one_line_share=1.5),
                dict(control_char_ratio=-0.1), dict(whitespace_ratio=float("nan")), dict(repeated_lines_min_lines=2.0)):
        with pytest.raises(ValueError):
            CleanPolicy(**bad)


def test_from_conf():
    values = {"ACCOUNT": "project_1", "CLEAN_MAX_CHAR_RUN": "5000", "CLEAN_ONE_LINE_SHARE": "0.9", "CLEAN_MAX_BYTES": " 1048576 "}
    policy = CleanPolicy.from_conf(values)
    assert policy == CleanPolicy(max_char_run=5000, one_line_share=0.9, max_bytes=1_048_576)
    assert CleanPolicy.from_conf({}) == DEFAULT
    assert CleanPolicy.from_conf({"CLEAN_CONTROL_CHAR_RATIO": "1e-3"}).control_char_ratio == 0.001
    with pytest.raises(ValueError, match="CLEAN_MAX_CHAR_RUN"):
        CleanPolicy.from_conf({"CLEAN_MAX_CHARS_RUN": "5"})  # a typo is named, with the suggestion
    for key, value in (("CLEAN_MAX_CHAR_RUN", "5k"), ("CLEAN_MAX_CHAR_RUN", "0"), ("CLEAN_MAX_BYTES", "-1"),
                       ("CLEAN_ONE_LINE_SHARE", "2"), ("CLEAN_ONE_LINE_SHARE", "nan"), ("CLEAN_WHITESPACE_RATIO", "")):
        with pytest.raises(ValueError, match=key):
            CleanPolicy.from_conf({key: value})


def test_conf_keys_document_every_field():
    assert list(CONF_KEYS) == ["CLEAN_" + f.name.upper() for f in fields(CleanPolicy)]
    assert all(CONF_KEYS.values())


def test_summary():
    s = summary(DEFAULT, 3, {"char_run": 2, "control_chars": 2})
    assert s == {
        "thresholds": DEFAULT.to_json(),
        "quarantined": 3,
        "reasons": {r: {"char_run": 2, "control_chars": 2}.get(r, 0) for r in REASONS},
    }
    assert list(s["reasons"]) == list(REASONS)
    with pytest.raises(ValueError):
        summary(DEFAULT, 1, {"too_long": 1})
