"""A git source's state machine with a fake git: candidate, applied, refused, failures.

The fake answers the commands healerd.daemon.sourcegit runs; the real git is the
integration test's (tests/integration/test_git_sources.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from healerd.config.sourcekeys import GitSource, SourceVerify
from healerd.daemon.gitrun import GitTimeout, Ran, base_env, config_env, run, ssh_command
from healerd.daemon.sources import KEEP_REFUSED, Source, Sources
from tests.unit.harness.files import trusted_tmp_dir

A, B, C = "a" * 40, "b" * 40, "c" * 40


class FakeGit:
    """The remote's tip, which commits are signed, and what each call saw."""

    def __init__(self) -> None:
        self.tip = A
        self.signed = {A, B, C}
        self.down = ""  # the fetch's error while the remote is away
        self.slow = False
        self.dirs = {A: "hosts/edge-7", B: "hosts/edge-7", C: "hosts/edge-7"}
        self.calls: list[tuple[list[str], Mapping[str, str]]] = []

    def __call__(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None
    ) -> Ran:
        args = list(argv)
        self.calls.append((args, env))
        verb = next(a for a in args[1:] if not a.startswith("-"))
        if verb == "init":
            Path(args[-1]).mkdir(parents=True)
            (Path(args[-1]) / "HEAD").write_text("ref: refs/heads/main\n")
        elif verb == "fetch" and self.slow:
            raise GitTimeout("took longer than 2s: killed")
        elif verb == "fetch" and self.down:
            return Ran(128, "", f"fatal: {self.down}\n")
        elif verb == "rev-parse":
            return Ran(0, self.tip + "\n", "")
        elif verb == "show":
            return Ran(0, "1700000000\n", "")
        elif verb == "verify-commit":
            ok = args[-1] in self.signed
            return Ran(0 if ok else 1, "", "" if ok else "No principal matched.\n")
        elif verb == "cat-file":
            commit, _, sub = args[-1].partition(":")
            return Ran(0, "tree\n", "") if self.dirs.get(commit) == sub else Ran(128, "", "")
        elif verb == "ls-tree":
            return Ran(0, "100644 blob 0123 12\tweb.yaml\0", "")
        elif verb == "checkout-index":
            tree = Path(next(a for a in args if a.startswith("--work-tree=")).split("=", 1)[1])
            (tree / "web.yaml").write_text("services: {}\n")
        return Ran(0, "", "")

    def ran(self, verb: str) -> int:
        return sum(1 for args, _ in self.calls if verb in args)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        signers = path / "allowed_signers"
        signers.write_text("ops ssh-ed25519 AAAA\n")
        yield path


def make(state_dir: Path, fake: FakeGit, **kw: object) -> Source:
    conf = GitSource(
        "site",
        str(kw.pop("url", "https://git.example.net/edge/site.git")),
        path="hosts/%l/",
        verify=kw.pop("verify", SourceVerify("ssh", str(state_dir / "allowed_signers"))),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )
    return Source(conf, state_dir / "sources", runner=fake, hostname="edge-7.example.net")


def test_a_signed_tip_becomes_the_candidate_then_the_applied_commit(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    told: list[str] = []
    src.on_change = lambda: told.append("changed")
    assert src.wanted() is None and src.applied() is None
    src.sync()
    s = src.state()
    assert (s.commit, s.candidate_commit, s.applied_commit, s.last_error) == (A, A, "", "")
    assert s.commit_time == 1700000000.0 and told == ["changed"]
    assert src.wanted() == (A, state_dir / "sources" / "site" / "trees" / A)
    src.accept(A)
    assert (src.state().applied_commit, src.state().candidate_commit) == (A, "")
    src.sync()  # the same tip: nothing verified again, nothing told
    assert fake.ran("verify-commit") == 1 and told == ["changed"]
    view = src.state().view(1700000060.0)
    assert view["commit_age_seconds"] == 60.0 and view["applied_commit"] == A


def test_an_unsigned_tip_is_refused_once_and_remembered(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    src.accept(A)
    fake.tip, fake.signed = B, {A}
    src.sync()
    s = src.state()
    assert (s.commit, s.applied_commit, s.candidate_commit) == (B, A, "")
    assert s.last_error == (
        f"commit {B[:12]} refused: commit {B[:12]} is not signed by an allowed key "
        "(No principal matched.)"
    )
    src.sync()
    assert fake.ran("verify-commit") == 2  # B was not checked again
    assert src.wanted() == (A, src.git.trees / A)


def test_the_loaders_refusal_keeps_the_applied_commit(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    src.accept(A)
    fake.tip = B
    src.sync()
    src.accept(C)  # not the candidate: nothing happens
    assert src.state().candidate_commit == B
    src.refuse(B, "web.yaml:3:5: services.web.image: is required")
    s = src.state()
    assert (s.applied_commit, s.candidate_commit) == (A, "")
    assert s.last_error.endswith("web.yaml:3:5: services.web.image: is required")
    assert sorted(p.name for p in src.git.trees.iterdir()) == [A]
    src.refuse(A, "late")  # the applied commit cannot be refused after the fact
    assert src.state().applied_commit == A


def test_a_newer_candidate_replaces_one_never_loaded(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    fake.tip = B
    src.sync()
    assert src.state().candidate_commit == B
    src.accept(A)  # the loader's answer for the older one comes late: ignored
    assert src.state().applied_commit == ""
    src.accept(B)
    assert src.state().applied_commit == B
    assert sorted(p.name for p in src.git.trees.iterdir()) == [B]


def test_a_failed_fetch_keeps_everything_and_clears_when_it_works(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    src.accept(A)
    fake.down = "unable to access 'https://git.example.net/edge/site.git/': Could not resolve"
    src.sync()
    assert src.state().last_error.startswith("fetch of main failed: fatal: unable to access")
    assert src.state().applied_commit == A
    fake.down, fake.slow = "", True
    src.sync()
    assert src.state().last_error == "git fetch took longer than 2s: killed"
    fake.slow = False
    src.sync()
    assert src.state().last_error == "" and src.rounds == 4


def test_the_hosts_directory_missing_is_a_refusal(state_dir: Path) -> None:
    fake = FakeGit()
    fake.dirs[A] = "hosts/other"
    src = make(state_dir, fake)
    src.sync()
    said = f"commit {A[:12]} refused: commit {A[:12]} has no directory hosts/edge-7/"
    assert src.state().last_error == said


def test_verify_none_applies_unsigned_commits(state_dir: Path) -> None:
    fake = FakeGit()
    fake.signed = set()
    src = make(state_dir, fake, verify=SourceVerify())
    src.sync()
    assert src.state().candidate_commit == A and fake.ran("verify-commit") == 0


def test_the_ssh_check_needs_a_known_principal(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    (env,) = [env for args, env in fake.calls if "verify-commit" in args]
    pairs = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(3)}
    assert pairs["gpg.ssh.allowedSignersFile"] == str(state_dir / "allowed_signers")
    assert pairs["gpg.minTrustLevel"] == "fully"
    assert env["GNUPGHOME"] == str(state_dir / "sources" / "site" / "gnupg")  # not root's


def test_a_token_rides_in_the_environment_and_is_never_said(state_dir: Path) -> None:
    token = state_dir / "token"
    token.write_text("deploy:s3cret-token\n")
    token.chmod(0o600)
    fake = FakeGit()
    fake.down = "Authentication failed for deploy:s3cret-token"
    src = make(state_dir, fake, credentials=str(token))
    src.sync()
    (args, env), *_ = [(a, e) for a, e in fake.calls if "fetch" in a]
    assert "s3cret-token" not in " ".join(args)
    assert any(v.startswith("Authorization: Basic ") for v in env.values())
    assert env["GIT_ALLOW_PROTOCOL"] == "https"
    assert "s3cret" not in src.state().last_error and "***" in src.state().last_error


def test_what_was_applied_survives_a_restart(state_dir: Path) -> None:
    fake = FakeGit()
    src = make(state_dir, fake)
    src.sync()
    src.accept(A)
    fake.tip, fake.signed = B, {A}
    src.sync()
    again = make(state_dir, FakeGit())
    assert again.applied() == (A, src.git.trees / A)
    assert again.state().commit == B and again.state().fetched_at is not None


def test_refusals_are_bounded(state_dir: Path) -> None:
    fake = FakeGit()
    fake.signed = set()
    src = make(state_dir, fake)
    for i in range(KEEP_REFUSED + 5):
        fake.tip = f"{i:040x}"
        fake.dirs[fake.tip] = "hosts/edge-7"
        src.sync()
    assert len(src._refused) == KEEP_REFUSED


def test_sources_views_and_sync_now(state_dir: Path) -> None:
    confs = [GitSource("one", "file:///srv/one"), GitSource("two", "file:///srv/two")]
    sources = Sources(confs, state_dir, runner=FakeGit(), hostname="h")
    assert [v["name"] for v in sources.views()] == ["one", "two"]
    assert sources.sync_now(None) == {"one": 0, "two": 0}
    assert sources.sync_now("two") == {"two": 0}
    assert not sources.wait({"one": 0}, 0.05)  # no thread runs: no round
    with pytest.raises(KeyError):
        sources.sync_now("three")


def test_git_gets_an_environment_of_its_own(tmp_path: Path) -> None:
    env = base_env("ssh", tmp_path / "gnupg")
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_ALLOW_PROTOCOL"] == "ssh" and "SSH_AUTH_SOCK" not in env
    assert config_env([("a.b", "c")]) == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "a.b",
        "GIT_CONFIG_VALUE_0": "c",
    }
    cmd = ssh_command("/etc/healerd/git key", "/etc/healerd/known_hosts")
    assert "'/etc/healerd/git key'" in cmd and "StrictHostKeyChecking=yes" in cmd
    assert "BatchMode=yes" in cmd and "UserKnownHostsFile=/etc/healerd/known_hosts" in cmd


def test_a_run_past_its_deadline_is_killed_with_its_children() -> None:
    """git's helpers (ssh, git-remote-https) are its children: the group goes at once."""
    marker = "31.4159"
    began = time.monotonic()
    with pytest.raises(GitTimeout, match=r"took longer than 0\.5s: killed"):
        run(["sh", "-c", f"sleep {marker} & sleep {marker}; wait"], env={"PATH": "/bin"},
            timeout=0.5)  # fmt: skip
    assert time.monotonic() - began < 3
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert left.stdout == ""
    done = run(["sh", "-c", "echo out; echo err >&2; exit 3"], env={"PATH": "/bin"}, timeout=5)
    assert done == Ran(3, "out\n", "err\n")


def test_a_state_dir_that_cannot_be_written_costs_no_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: ENOSPC while a commit was accepted left Daemon.reload (the main loop), and
    healerd crash-looped for as long as the disk stayed full."""
    import errno

    from healerd.daemon.statefile import StateFile
    from tests.unit.harness.daemon import daemon

    with trusted_tmp_dir() as state:
        (state / "allowed_signers").write_text("ops ssh-ed25519 AAAA\n")
        src = make(state, FakeGit())
        src.sync()
        assert src.state().candidate_commit
        d, _ = daemon(tmp_path)
        d.sources.by_name = {"site": src}

        def full(self: StateFile, data: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(StateFile, "save", full)
        d.reload()
        s = src.state()
        assert s.applied_commit and not s.candidate_commit, "accepted all the same"
        assert "state not saved" in s.last_error and "No space left" in s.last_error
        assert any(f.endswith("/web.yaml") for f in d.controller.desired.files or ())


def test_a_state_not_saved_is_said_until_a_save_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: the next round (the same commit) cleared the error, and nothing saved the
    state again once the disk had room: a restart then found the commit not applied."""
    import errno
    import json

    from healerd.daemon.statefile import StateFile

    real_save = StateFile.save
    with trusted_tmp_dir() as state:
        (state / "allowed_signers").write_text("ops ssh-ed25519 AAAA\n")
        src = make(state, FakeGit())
        src.sync()
        commit = src.state().candidate_commit

        def full(self: StateFile, data: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(StateFile, "save", full)
        src.accept(commit)
        src.sync()  # a round that finds the same commit, the disk still full
        assert "state not saved" in src.state().last_error
        monkeypatch.setattr(StateFile, "save", real_save)  # room again
        src.sync()
        assert src.state().last_error == ""
        saved = [json.loads(p.read_text()) for p in state.rglob("state.json")]
        assert [d["applied"] for d in saved] == [commit]
