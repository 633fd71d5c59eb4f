"""Configuration from git against a real git server on loopback (`git daemon`, Debian's
git) and file://, with commits signed by `ssh-keygen` keys (`gpg.format=ssh`): a good
commit is fetched, verified and checked out; an unsigned or wrongly signed one is refused
and the last good one kept; a remote that goes away, or never answers, keeps the last
good tree and says why; credentials never reach the status or the log. No engine needed.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from healerd.config.sourcekeys import GitSource, SourceVerify
from healerd.daemon.sources import Source, Sources
from tests.support.gitserver import GIT_ENV, Upstream, git, make_upstream, serve


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return make_upstream(tmp_path)


@pytest.fixture
def git_daemon(upstream: Upstream) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    yield from serve(upstream)


def source(upstream: Upstream, url: str, state: Path, **kw: object) -> Source:
    conf = GitSource(
        "fleet",
        url,
        path=str(kw.pop("path", "hosts/%H/")),
        timeout=float(kw.pop("timeout", 20.0)),  # type: ignore[arg-type]
        verify=SourceVerify("ssh", str(upstream.signers)),
        **kw,  # type: ignore[arg-type]
    )
    return Source(conf, state / "sources", hostname="edge-7.example.net")


WEB = "services:\n  web:\n    image: busybox:1.36\n"


def test_a_good_commit_is_fetched_verified_and_checked_out(
    upstream: Upstream, git_daemon: tuple[str, object], tmp_path: Path
) -> None:
    good = upstream.commit(
        {"hosts/edge-7.example.net/web.yaml": WEB, "hosts/other/db.yaml": "x: 1\n"},
        upstream.good_key,
    )
    changes: list[int] = []
    src = source(upstream, git_daemon[0], tmp_path / "state")
    src.on_change = lambda: changes.append(1)
    src.sync()
    state = src.state()
    assert (state.commit, state.candidate_commit, state.last_error) == (good, good, "")
    assert state.applied_commit == "" and changes == [1]
    assert state.commit_time and abs(state.commit_time - time.time()) < 60
    commit, tree = src.wanted() or ("", Path())
    assert commit == good and tree == tmp_path / "state" / "sources" / "fleet" / "trees" / good
    assert sorted(p.name for p in tree.iterdir()) == ["web.yaml"]  # this host's directory only
    assert (tree / "web.yaml").read_text() == WEB
    assert stat.S_IMODE(tree.stat().st_mode) == 0o555
    assert stat.S_IMODE((tree / "web.yaml").stat().st_mode) == 0o444
    src.accept(good)
    assert (src.state().applied_commit, src.state().candidate_commit) == (good, "")
    src.sync()  # nothing new: no second candidate
    assert changes == [1] and src.state().last_error == ""


def test_unsigned_and_wrongly_signed_commits_are_refused_and_the_last_good_stays(
    upstream: Upstream, git_daemon: tuple[str, object], tmp_path: Path
) -> None:
    path = "hosts/edge-7.example.net/web.yaml"
    good = upstream.commit({path: WEB}, upstream.good_key)
    src = source(upstream, git_daemon[0], tmp_path / "state")
    src.sync()
    src.accept(good)
    for key, words in ((None, "no signature"), (upstream.bad_key, "No principal matched")):
        bad = upstream.commit({path: "services: {}\n"}, key)
        src.sync()
        state = src.state()
        assert (state.commit, state.applied_commit, state.candidate_commit) == (bad, good, "")
        assert f"commit {bad[:12]} refused: " in state.last_error
        assert "not signed by an allowed key" in state.last_error and words in state.last_error
        assert src.wanted() == (good, src.git.trees / good)
        assert (src.git.trees / good / "web.yaml").read_text() == WEB
        assert not (src.git.trees / bad).exists()
    fixed = upstream.commit({path: WEB + "    replicas: 2\n"}, upstream.good_key)
    src.sync()
    assert (src.state().candidate_commit, src.state().last_error) == (fixed, "")


def test_a_tree_the_loader_refuses_keeps_the_applied_commit(
    upstream: Upstream, tmp_path: Path
) -> None:
    """The daemon's side of all-or-nothing: refuse(commit, reason) after a broken file."""
    path = "hosts/edge-7.example.net/web.yaml"
    good = upstream.commit({path: WEB}, upstream.good_key)
    src = source(upstream, f"file://{upstream.work}", tmp_path / "state")
    src.sync()
    src.accept(good)
    broken = upstream.commit({path: "services: [\n"}, upstream.good_key)
    src.sync()
    assert src.wanted() == (broken, src.git.trees / broken)
    src.refuse(broken, "web.yaml:1:11: unexpected end of the file")
    state = src.state()
    assert (state.applied_commit, state.candidate_commit) == (good, "")
    assert state.last_error == (
        f"commit {broken[:12]} refused: web.yaml:1:11: unexpected end of the file"
    )
    assert src.wanted() == (good, src.git.trees / good) and not (src.git.trees / broken).exists()
    src.sync()  # the same tip: not offered again
    assert src.state().candidate_commit == "" and "refused" in src.state().last_error
    # A restart: the last good tree is there before any fetch, the refusal remembered.
    again = source(upstream, f"file://{upstream.work}", tmp_path / "state")
    assert again.applied() == (good, src.git.trees / good) and again.wanted() == again.applied()
    again.sync()
    assert again.state().candidate_commit == "" and "refused" in again.state().last_error
    # Other rules (here another URL): what was checked under the old ones is forgotten.
    other = source(upstream, "file:///nonexistent/fleet", tmp_path / "state")
    assert other.applied() is None and not src.git.trees.exists()


def test_a_remote_that_goes_away_keeps_the_last_good_tree(
    upstream: Upstream,
    git_daemon: tuple[str, subprocess.Popen[bytes]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = upstream.commit({"hosts/edge-7.example.net/web.yaml": WEB}, upstream.good_key)
    src = source(upstream, git_daemon[0], tmp_path / "state")
    src.sync()
    src.accept(good)
    git_daemon[1].kill()
    git_daemon[1].wait()
    with caplog.at_level(logging.WARNING, "healerd.sources"):
        src.sync()
        src.sync()
    state = src.state()
    assert state.applied_commit == good and state.last_error.startswith("fetch of main failed")
    assert src.wanted() == (good, src.git.trees / good)
    assert (src.git.trees / good / "web.yaml").read_text() == WEB
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "the last good commit stays" in said[0]  # said once


def test_a_remote_that_never_answers_costs_one_timeout(upstream: Upstream, tmp_path: Path) -> None:
    """A listener that accepts and says nothing: git and its children are killed at the
    source's timeout, and the round ends with the error."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        src = source(upstream, f"git://127.0.0.1:{port}/fleet", tmp_path / "state", timeout=2.0)
        began = time.monotonic()
        src.sync()
        took = time.monotonic() - began
    finally:
        silent.close()
    assert took < 6, took
    assert "took longer than" in src.state().last_error and "killed" in src.state().last_error
    children = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "git"], capture_output=True, text=True
    ).stdout
    assert children == ""


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(self.headers.get("Authorization", ""))
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b"no")

    def log_message(self, *args: object) -> None:
        pass


def test_credentials_reach_the_server_never_the_status_or_the_log(
    upstream: Upstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = "s3cret-T0ken-for-the-fleet"
    cred = tmp_path / "git-token"
    cred.write_text(f"deploy:{token}\n")
    cred.chmod(0o600)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/edge/fleet.git"
    try:
        src = source(upstream, url, tmp_path / "state", credentials=str(cred))
        with caplog.at_level(logging.DEBUG):
            src.sync()
    finally:
        server.shutdown()
        server.server_close()
    assert any(h.startswith("Basic ") for h in _Recorder.seen)  # the token was sent
    sources = Sources([src.conf], tmp_path / "state", hostname="edge-7")
    shown = repr([src.state(), sources.views(), [r.getMessage() for r in caplog.records]])
    assert src.state().last_error  # the fetch failed, and says so
    assert token not in shown and "deploy:" not in shown
    kept = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert kept and not [p for p in kept if token.encode() in p.read_bytes()]


def test_a_credentials_file_others_may_read_is_refused(upstream: Upstream, tmp_path: Path) -> None:
    cred = tmp_path / "git-token"
    cred.write_text("s3cret-T0ken\n")
    cred.chmod(0o644)
    src = source(upstream, f"file://{upstream.work}", tmp_path / "state", credentials=str(cred))
    src.sync()
    assert "readable by" in src.state().last_error and "s3cret" not in src.state().last_error


def test_sync_now_wakes_the_thread_and_waits_for_its_round(
    upstream: Upstream, tmp_path: Path
) -> None:
    good = upstream.commit({"hosts/edge-7.example.net/web.yaml": WEB}, upstream.good_key)
    conf = GitSource(
        "fleet",
        f"file://{upstream.work}",
        path="hosts/%H",
        interval=3600.0,
        verify=SourceVerify("ssh", str(upstream.signers)),
    )
    changed = threading.Event()
    sources = Sources(
        [conf], tmp_path / "state", hostname="edge-7.example.net", on_change=changed.set
    )
    stop = threading.Event()
    threads = sources.threads(stop)
    for t in threads:
        t.start()
    try:
        assert changed.wait(20)
        src = sources.by_name["fleet"]
        src.accept(good)
        newer = upstream.commit({"hosts/edge-7.example.net/db.yaml": WEB}, upstream.good_key)
        assert sources.wait(sources.sync_now("fleet"), 20)
        assert src.state().candidate_commit == newer
    finally:
        stop.set()
        sources.stop()
        for t in threads:
            t.join(5)
    with pytest.raises(KeyError):
        sources.sync_now("nope")


def test_openpgp_signatures_against_the_gpg_keys_file_alone(
    upstream: Upstream, tmp_path: Path
) -> None:
    """verify: {gpg_keys: FILE}: a commit signed by a key of the file is taken, one
    signed by another OpenPGP key is refused, and no gpg process stays behind."""
    homes = {}
    for who in ("ops", "other"):
        home = tmp_path / f"gnupg-{who}"
        home.mkdir(mode=0o700)
        env = {**GIT_ENV, "GNUPGHOME": str(home)}
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key",
             f"{who} <{who}@example.net>", "ed25519", "sign", "never"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        homes[who] = home
    keys = tmp_path / "fleet.asc"
    keys.write_bytes(
        subprocess.run(
            ["gpg", "--export", "--armor", "ops@example.net"],
            env={**GIT_ENV, "GNUPGHOME": str(homes["ops"])},
            check=True,
            capture_output=True,
        ).stdout
    )
    keys.chmod(0o644)

    def commit(who: str, text: str) -> str:
        env = {**GIT_ENV, "GNUPGHOME": str(homes[who])}
        (upstream.work / "hosts" / "edge-7").mkdir(parents=True, exist_ok=True)
        (upstream.work / "hosts" / "edge-7" / "web.yaml").write_text(text)
        for args in (["add", "-A"], ["-c", f"user.signingkey={who}@example.net", "commit",
                                      "-q", "-S", "-m", who]):  # fmt: skip
            subprocess.run(["git", *args], cwd=upstream.work, env=env, check=True)
        return git("rev-parse", "HEAD", cwd=upstream.work)

    try:
        good = commit("ops", WEB)
        conf = GitSource(
            "fleet",
            f"file://{upstream.work}",
            path="hosts/%l",
            verify=SourceVerify("gpg", str(keys)),
        )
        src = Source(conf, tmp_path / "state" / "sources", hostname="edge-7.example.net")
        src.sync()
        assert (src.state().candidate_commit, src.state().last_error) == (good, "")
        src.accept(good)
        other = commit("other", "services: {}\n")
        src.sync()
        assert src.state().applied_commit == good
        assert f"commit {other[:12]} is not signed by an allowed key" in src.state().last_error
    finally:
        for home in homes.values():
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    left = subprocess.run(["pgrep", "-af", str(tmp_path / "state")], capture_output=True, text=True)
    assert left.stdout == ""


def test_a_tag_is_followed_as_a_branch_is(upstream: Upstream, tmp_path: Path) -> None:
    good = upstream.commit({"hosts/edge-7.example.net/web.yaml": WEB}, upstream.good_key)
    git("tag", "-a", "-m", "stable", "stable", cwd=upstream.work)
    upstream.commit({"hosts/edge-7.example.net/web.yaml": "services: {}\n"}, None)
    src = source(upstream, f"file://{upstream.work}", tmp_path / "state", ref="stable")
    src.sync()
    assert (src.state().commit, src.state().candidate_commit) == (good, good)
