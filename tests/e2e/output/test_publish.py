"""./hplt-shard --publish OUT DEST against a real rclone and a real server on 127.0.0.1.

The server is `rclone serve webdav` over a temp folder (WebDAV has no hashes: the upload is
checked by download); a plain local folder as DEST exercises the remote-sha256 path. Every
test starts its own server on a free port and kills it at teardown; every wait is bounded.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from shard_pipeline.submit.publish import PUBLISHED_NAME, SUMS_NAME
from shard_pipeline.run.claim import claim_path, publish_lock_path
from shard_pipeline.submit.dest import mask
from tests.pipeline_util import lang_dir, LANG, LICENSE, tree_bytes

ROOT = Path(__file__).resolve().parents[3]
RCLONE = shutil.which("rclone")
needs_rclone = pytest.mark.skipif(RCLONE is None, reason="rclone not installed (apt-get install rclone; .ci/run does)")
WAIT = 20.0  # seconds: the longest any test waits for a server or a file to appear


# ---------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def rclone_config(tmp_path, monkeypatch):
    """An empty rclone config of the test's own: the user's remotes never take part.

    One try per call (rclone's own variables win over hplt-shard's defaults): a dead server
    fails at once instead of after rclone's retries, which help only a flaky remote.
    """
    conf = tmp_path / "rclone.conf"
    conf.write_text("")
    monkeypatch.setenv("RCLONE_CONFIG", str(conf))
    monkeypatch.setenv("RCLONE_RETRIES", "1")
    monkeypatch.setenv("RCLONE_LOW_LEVEL_RETRIES", "1")
    monkeypatch.delenv("RCLONE_BWLIMIT", raising=False)
    return conf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDav:
    """`rclone serve webdav ROOT` on 127.0.0.1:PORT; start() again after kill() serves the same folder."""

    def __init__(self, root: Path, auth: tuple[str, str] | None = None):
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.auth = auth  # (user, password) the server demands
        root.mkdir(parents=True, exist_ok=True)

    def dest(self, path: str = "pub/eng") -> str:
        return f":webdav,url='http://127.0.0.1:{self.port}':{path}"

    def start(self) -> None:
        auth = ["--user", self.auth[0], "--pass", self.auth[1]] if self.auth else []
        self.proc = subprocess.Popen([RCLONE, "serve", "webdav", str(self.root), "--addr", f"127.0.0.1:{self.port}",
                                      "--dir-cache-time", "0s", *auth], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, "rclone serve webdav exited at start"
                time.sleep(0.1)
        raise AssertionError(f"rclone serve webdav did not listen on {self.port} within {WAIT} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=WAIT)
        self.proc = None


@pytest.fixture
def webdav(tmp_path):
    server = WebDav(tmp_path / "served")
    server.start()
    yield server
    server.kill()


def publish(out: Path, dest: str, *extra: str) -> int:
    return cli.main(["--publish", str(out), dest, *extra])


def published_tree(out: Path) -> dict[str, bytes]:
    """What DEST must hold: OUT byte for byte, and the sums file."""
    tree = tree_bytes(out)
    names = json.loads(tree["_MANIFEST.json"])
    sums = "".join(f"{e['sha256']}  {e['name']}\n" for e in (*names["shards"], *names["files"]))
    sums += f"{hashlib.sha256(tree['_MANIFEST.json']).hexdigest()}  _MANIFEST.json\n"
    return {**tree, SUMS_NAME: sums.encode()}


def snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(d).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in d.rglob("*") if p.is_file()}


def run_subprocess(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "hplt-shard"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


# ---------------------------------------------------------------- uploads


@needs_rclone
def test_webdav_upload_byte_for_byte_and_recorded(finished_run, webdav, capsys):
    out, run = finished_run
    before = tree_bytes(out)
    assert publish(out, webdav.dest(), "--run-dir", str(run)) == 0
    assert tree_bytes(webdav.root / "pub" / "eng") == published_tree(out)
    assert tree_bytes(out) == before  # OUT untouched: nothing added, nothing changed
    text = capsys.readouterr().out
    assert "verified by download" in text and webdav.dest() in text
    record = json.loads((lang_dir(run) / PUBLISHED_NAME).read_text())["publications"][-1]
    assert record["dest"] == webdav.dest()
    assert record["verified_by"] == "download"
    assert record["manifest_sha256"] == published_tree(out)[SUMS_NAME].decode().splitlines()[-1].split()[0]
    assert time.time() - time.mktime(time.strptime(record["published_at"], "%Y-%m-%dT%H:%M:%SZ")) < 3600 * 24


@needs_rclone
def test_local_dest_checked_by_remote_sha256_and_sums_verify(finished_run, tmp_path, capsys):
    out, _ = finished_run
    dest = tmp_path / "bucket" / "prefix"
    assert publish(out, str(dest)) == 0
    text = capsys.readouterr().out
    assert "verified by the remote's sha256" in text
    assert "run directory of" in text and "unknown" in text  # no --run-dir: said, not guessed
    assert tree_bytes(dest) == published_tree(out)
    check = subprocess.run(["sha256sum", "-c", SUMS_NAME], cwd=dest, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


@needs_rclone
def test_second_publish_is_a_checked_success_and_nothing_changes(finished_run, webdav, capsys):
    """Publishing what DEST already holds complete is exit 0 (idempotent), after checking it there."""
    out, _ = finished_run
    assert publish(out, webdav.dest()) == 0
    before = snapshot(webdav.root)
    capsys.readouterr()
    assert publish(out, webdav.dest()) == 0
    text = capsys.readouterr().out
    assert "already published" in text and "complete" in text and "nothing was uploaded" in text
    assert snapshot(webdav.root) == before


@needs_rclone
def test_complete_dest_that_was_changed_is_refused_then_repaired(finished_run, tmp_path, capsys):
    """A complete DEST whose shard differs: exit 1 naming it; the advised step repairs it."""
    out, _ = finished_run
    dest = tmp_path / "dest"
    assert publish(out, str(dest)) == 0
    shard = dest / "shard-00001-of-00003.parquet"
    data = bytearray(shard.read_bytes())
    data[50] ^= 0xFF
    shard.write_bytes(bytes(data))
    (dest / "shard-00002-of-00003.parquet").unlink()
    before = snapshot(dest)
    capsys.readouterr()
    assert publish(out, str(dest)) == 1
    err = capsys.readouterr().err
    assert "2 files there differ" in err and "shard-00001-of-00003.parquet" in err and "shard-00002" in err
    assert "never overwrites" in err and "deletefile" in err
    assert snapshot(dest) == before
    (dest / "_MANIFEST.json").unlink()  # the advised step
    assert publish(out, str(dest)) == 0
    assert tree_bytes(dest) == published_tree(out)


@needs_rclone
def test_foreign_files_at_dest_refused_untouched(finished_run, webdav, capsys):
    out, _ = finished_run
    other = webdav.root / "pub" / "eng"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("someone else's\n")
    (other / "shard-00000-of-00003.parquet").write_bytes(b"not ours")
    before = snapshot(webdav.root)
    assert publish(out, webdav.dest()) == 2
    err = capsys.readouterr().err
    assert "refusing to publish" in err and "notes.txt" in err and "nothing was changed" in err
    assert snapshot(webdav.root) == before


@needs_rclone
def test_another_outputs_partial_upload_refused(finished_run, tmp_path, capsys):
    out, _ = finished_run
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / SUMS_NAME).write_text("0" * 64 + "  shard-00000-of-00001.parquet\n")
    before = snapshot(dest)
    assert publish(out, str(dest)) == 2
    err = capsys.readouterr().err
    assert "partial upload of another output" in err and "rclone purge" in err and "nothing was changed" in err.lower()
    assert snapshot(dest) == before


@needs_rclone
def test_output_that_does_not_verify_is_refused(finished_run, tmp_path, capsys):
    out, _ = finished_run
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    shard = bad / "shard-00001-of-00003.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    assert publish(bad, str(dest)) == 1
    err = capsys.readouterr().err
    assert "does not verify" in err and "shard-00001-of-00003.parquet" in err and "--verify" in err
    assert not dest.exists()


# ---------------------------------------------------------------- interrupted, then finished


@needs_rclone
def test_upload_interrupted_midway_then_finished(finished_run, webdav):
    """The server dies mid-transfer (a bandwidth limit keeps the upload slow enough to catch it)."""
    out, run = finished_run
    target = webdav.root / "pub" / "eng"
    env = {**os.environ, "RCLONE_BWLIMIT": "8k:off"}  # slow uploads, full-speed checks
    proc = subprocess.Popen([sys.executable, str(ROOT / "hplt-shard"), "--publish", str(out), webdav.dest()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + WAIT * 3  # the verify before the upload takes a few seconds
        while not list(target.glob("*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert list(target.glob("*.parquet")), "the upload never started"
        webdav.kill()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "broke midway" in err and "run the same command again" in err and "Traceback" not in err
    assert (target / SUMS_NAME).exists() and not (target / "_MANIFEST.json").exists()
    assert tree_bytes(target) != published_tree(out)

    webdav.start()  # same folder, same port: the same DEST
    assert publish(out, webdav.dest(), "--run-dir", str(run)) == 0
    assert tree_bytes(target) == published_tree(out)


@needs_rclone
def test_partial_upload_with_a_corrupt_file_is_repaired(finished_run, tmp_path, capsys):
    """A same-size wrong copy is caught by the sha256 check at DEST and sent again."""
    out, _ = finished_run
    dest = tmp_path / "dest"
    assert publish(out, str(dest)) == 0
    (dest / "_MANIFEST.json").unlink()
    shard = dest / "shard-00002-of-00003.parquet"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF
    shard.write_bytes(bytes(data))
    (dest / "shard-00000-of-00003.parquet").write_bytes(b"PAR1 cut short")
    capsys.readouterr()
    assert publish(out, str(dest)) == 0
    text = capsys.readouterr().out
    assert "partial upload of this output" in text and "uploading them again" in text
    assert tree_bytes(dest) == published_tree(out)


# ---------------------------------------------------------------- clear failures


@needs_rclone
def test_unreachable_remote_fails_clearly(finished_run):
    out, _ = finished_run
    dest = f":webdav,url='http://127.0.0.1:{free_port()}':pub/eng"
    proc = run_subprocess("--publish", str(out), dest)
    assert proc.returncode == 1
    assert "cannot reach" in proc.stderr and "connection refused" in proc.stderr
    assert "run the same command again" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@needs_rclone
def test_unknown_remote_name_fails_clearly(finished_run, tmp_path):
    out, _ = finished_run
    proc = run_subprocess("--publish", str(out), "nosuchremote:bucket/prefix", timeout=60)
    assert proc.returncode == 1
    assert "nosuchremote" in proc.stderr and "rclone listremotes" in proc.stderr and "Traceback" not in proc.stderr


def test_rclone_missing_from_path(finished_run, tmp_path, monkeypatch, capsys):
    out, _ = finished_run
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert publish(out, str(tmp_path / "dest")) == 2
    err = capsys.readouterr().err
    assert "rclone is not on PATH" in err and "apt-get install rclone" in err and "module load lumio" in err
    assert not (tmp_path / "dest").exists()


def test_run_dir_that_did_not_make_out_is_refused(finished_run, tmp_path, capsys):
    out, _ = finished_run
    other = tmp_path / "run"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"config_sha256": "0" * 64, "execution": {"out": str(out)}}))
    if RCLONE is None:
        pytest.skip("needs rclone on PATH to get past the first check")
    assert publish(out, str(tmp_path / "dest"), "--run-dir", str(other)) == 2
    assert "did not write" in capsys.readouterr().err
    assert not (tmp_path / "dest").exists() and not (other / PUBLISHED_NAME).exists()


def test_secrets_in_dest_are_masked():
    dest = ":s3,provider=Ceph,access_key_id=AKIA,secret_access_key='a:b',endpoint=https://x.example:bucket/p"
    shown = mask(dest)
    assert "AKIA" not in shown and "a:b" not in shown
    assert shown == ":s3,provider=Ceph,access_key_id=***,secret_access_key=***,endpoint=https://x.example:bucket/p"
    assert mask("lumi-o:bucket/prefix") == "lumi-o:bucket/prefix"
    dav = ":webdav,url='http://me:p%40ss@h:8080/d?sig=S1G&x=1',headers='Authorization,Basic QUJD,Accept,*/*':p"
    assert mask(dav) == ":webdav,url='http://***@h:8080/d?sig=***&x=1',headers='Authorization,***,Accept,***':p"


def test_dest_inside_out_is_refused(finished_run, capsys):
    out, _ = finished_run
    if RCLONE is None:
        pytest.skip("needs rclone on PATH to get past the first check")
    assert publish(out, str(out / "_pub")) == 2
    assert "inside OUT" in capsys.readouterr().err
    assert not (out / "_pub").exists()


# ---------------------------------------------------------------- secrets in DEST (issue 19, item 4)

USER, PASSWORD = "alice-user", "s3cr3t-Pw0rd"
BASIC = "Basic " + __import__("base64").b64encode(f"{USER}:{PASSWORD}".encode()).decode()
LEAKS = (PASSWORD, BASIC.split()[1], f"{USER}:{PASSWORD}", USER)


@needs_rclone
def test_credentials_in_url_and_headers_never_shown_nor_stored_readable(finished_run, tmp_path, capfd):
    """A server that demands basic auth: credentials as URL userinfo, then as a header; a wrong
    password and a dead server make rclone repeat the URL. No line, message or record shows them."""
    out, run = finished_run
    server = WebDav(tmp_path / "served", auth=(USER, PASSWORD))
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        by_url = f":webdav,url='http://{USER}:{PASSWORD}@127.0.0.1:{server.port}':pub/a"
        by_header = f":webdav,url='{base}',headers='Authorization,{BASIC}':pub/b"
        wrong = f":webdav,url='http://{USER}:{PASSWORD}x@127.0.0.1:{server.port}':pub/c"
        assert publish(out, by_url, "--run-dir", str(run)) == 0
        assert publish(out, by_header, "--run-dir", str(run)) == 0
        assert tree_bytes(server.root / "pub" / "a") == tree_bytes(server.root / "pub" / "b") == published_tree(out)
        assert publish(out, wrong) == 1
    finally:
        server.kill()
    dead = run_subprocess("--publish", str(out), by_url)  # the server is gone: rclone names the URL
    assert dead.returncode == 1 and "cannot reach" in dead.stderr
    seen = capfd.readouterr()
    text = seen.out + seen.err + dead.stdout + dead.stderr
    assert "401" in text or "Unauthorized" in text  # the wrong password's message came through, masked
    record = lang_dir(run) / PUBLISHED_NAME
    stored = record.read_text()
    for secret in LEAKS:
        assert secret not in text and secret not in stored, secret
    assert f"127.0.0.1:{server.port}" in stored and "***" in stored
    assert record.stat().st_mode & 0o777 == 0o600


# ---------------------------------------------------------------- OUT held while publishing (item 9)


@needs_rclone
def test_publish_refused_while_a_run_holds_out(finished_run, tmp_path, capsys):
    out, _ = finished_run
    holder = tmp_path / "other-run"
    holder.mkdir()
    claim_path(out).write_text(f"{holder}\n")  # an unfinished run (no DONE) that will replace OUT
    try:
        assert publish(out, str(tmp_path / "dest")) == 2
    finally:
        claim_path(out).unlink()
    err = capsys.readouterr().err
    assert f"held by run {holder}" in err and "--status" in err and "Nothing was uploaded" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "dest").exists()


@needs_rclone
def test_run_refused_while_out_is_being_published(finished_run, webdav, tmp_path):
    """An upload holds OUT (its server paused mid-transfer): a run onto the same OUT is refused
    before it starts; once the server goes on, the upload finishes."""
    out, run = finished_run
    target = webdav.root / "pub" / "eng"
    env = {**os.environ, "RCLONE_BWLIMIT": "8k:off"}  # slow uploads, full-speed checks
    proc = subprocess.Popen([sys.executable, str(ROOT / "hplt-shard"), "--publish", str(out), webdav.dest()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + WAIT * 3
        while not list(target.glob("*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert list(target.glob("*.parquet")), "the upload never started"
        webdav.proc.send_signal(signal.SIGSTOP)  # the publish now waits on its server (idle timeout 60 s)
        try:
            assert publish_lock_path(out).exists() and proc.poll() is None
            before = tree_bytes(out)
            refused = run_subprocess(LANG, "--corpus", "v4", "--local-root", str(run.parent / "corpus" / "clean"), "--out",
                                     str(out), "--run-dir", str(tmp_path / "run2"), "--executor", "local",
                                     "--license", LICENSE, "--shard-rows", "40")
        finally:
            webdav.proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert refused.returncode == 2, refused.stderr
    assert "is being published now" in refused.stderr and "run this command again" in refused.stderr
    assert not (tmp_path / "run2").exists() and not claim_path(out).exists()
    assert proc.returncode == 0, err
    assert tree_bytes(out) == before and tree_bytes(target) == published_tree(out)
    assert not publish_lock_path(out).exists()  # the last publisher removes it


# ---------------------------------------------------------------- DEST inside OUT, however spelled (item 10)


def _spellings(out: Path, run: Path, tmp_path: Path, conf: Path) -> dict[str, str]:
    other_output = tmp_path / "other-output"
    shutil.copytree(out, other_output)
    link = tmp_path / "link-to-out"
    link.symlink_to(out)
    conf.write_text(f"[disk]\ntype = local\n\n[pub]\ntype = alias\nremote = disk:{out.parent}\n\n"
                    f"[both]\ntype = union\nupstreams = {tmp_path}/elsewhere disk:{out}/u\n")
    rel = os.path.relpath(out, Path.cwd())
    return {"local path": str(out / "sub"), "relative ..": f"{rel}/../{out.name}/sub",
            ":local:": f":local:{out}/sub", "symlink": str(link / "sub"), ":local: symlink": f":local:{link}",
            "remote of type local": f"disk:{out}/sub", "alias to a local remote": f"pub:{out.name}/sub",
            "union upstream": "both:x", "OUT.tmp": f":local:{out}.tmp/x", "claim file": f"{claim_path(out)}",
            "run dir": f"disk:{run}/pub", "a run dir not named": f":local:{run}/x",
            "another output": f"{other_output}/pub"}


@needs_rclone
def test_dest_inside_out_is_refused_however_spelled(finished_run, tmp_path, rclone_config, capsys):
    out, run = finished_run
    before = snapshot(out.parent)
    for what, dest in _spellings(out, run, tmp_path, rclone_config).items():
        given = () if what == "a run dir not named" else ("--run-dir", str(run))
        assert publish(out, dest, *given) == 2, what
        err = capsys.readouterr().err
        assert "lies inside" in err and "nothing was uploaded" in err, (what, err)
    assert snapshot(out.parent) == before  # nothing written into OUT, OUT.tmp, the claim or the run dir
    assert publish(out, f"pub:{out.name}-published") == 0  # the same remotes, outside OUT: fine
    assert tree_bytes(out.parent / f"{out.name}-published") == published_tree(out)


@needs_rclone
def test_out_changed_mid_upload_says_so_and_its_next_step_works(finished_run, webdav, tmp_path):
    """OUT's manifest is edited while the shards upload (server paused): the publish fails naming
    it; the re-run refuses DEST's partial upload with one next step; after that step it publishes."""
    out = tmp_path / "out"
    shutil.copytree(finished_run[0], out)
    target = webdav.root / "pub" / "eng"
    env = {**os.environ, "RCLONE_BWLIMIT": "8k:off"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "hplt-shard"), "--publish", str(out), webdav.dest()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + WAIT * 3
        while not list(target.glob("*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert list(target.glob("*.parquet")), "the upload never started"
        webdav.proc.send_signal(signal.SIGSTOP)
        try:
            m = json.loads((out / "_MANIFEST.json").read_text())
            m["version"] = "2"  # another version of the same shards: it verifies, with other bytes
            (out / "_MANIFEST.json").write_text(json.dumps(m, indent=2, ensure_ascii=False) + "\n")
        finally:
            webdav.proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "OUT changed while it was published" in err and "_MANIFEST.json" in err and "Traceback" not in err
    assert not (target / "_MANIFEST.json").exists()
    again = run_subprocess("--publish", str(out), webdav.dest())
    assert again.returncode == 2 and "partial upload of another output" in again.stderr, again.stderr
    shutil.rmtree(target)  # the step it names: rclone purge DEST
    assert publish(out, webdav.dest()) == 0
    assert tree_bytes(target) == published_tree(out)


def test_a_publish_lock_left_by_a_killed_publish_blocks_no_run(tmp_path):
    """The lock is a flock: a file nobody holds (its publish was killed) is no publish."""
    from shard_pipeline.run.claim import claim, held_for_publish, release, OutBeingPublished

    out = tmp_path / "out"
    publish_lock_path(out).write_text("")
    claim(out, tmp_path / "run")
    release(out, tmp_path / "run")
    with held_for_publish(out) as held:
        assert held
        with pytest.raises(OutBeingPublished):
            claim(out, tmp_path / "run")
    assert not publish_lock_path(out).exists() and not claim_path(out).exists()
    claim(out, tmp_path / "run")


def test_local_targets_follow_remotes_as_rclone_does():
    """The resolution behind the refusal above, for the remote kinds the real-rclone test does not cover."""
    from shard_pipeline.submit.dest import local_targets

    conf = {"disk": {"type": "local"}, "sec": {"type": "crypt", "remote": "disk:/data/out/enc"},
            "comb": {"type": "combine", "upstreams": "a=disk:/data/a b=disk:/data/out"},
            "loop": {"type": "alias", "remote": "loop:x"}, "s3": {"type": "s3"}}
    assert local_targets("sec:x", lambda: conf) == ["/data/out/enc/x"]
    assert local_targets("comb:b/y", lambda: conf) == ["/data/out/y"]
    assert local_targets("comb:a/y", lambda: conf) == ["/data/a/y"]
    assert local_targets(":alias,remote='disk:/data/out':sub", lambda: conf) == ["/data/out/sub"]
    assert local_targets("envdisk:/data/out", lambda: {}, {"RCLONE_CONFIG_ENVDISK_TYPE": "local"}) == ["/data/out"]
    assert local_targets("loop:y", lambda: conf) == [] and local_targets("s3:bucket", lambda: conf) == []
    assert local_targets("lumi-o:bucket", dict) == []
