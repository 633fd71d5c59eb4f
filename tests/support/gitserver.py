"""A git server on loopback for the git source tests (issue 35): a work repository whose
commits are signed with `ssh-keygen` keys (`gpg.format=ssh`), served by Debian's
git-daemon."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "ops",
    "GIT_AUTHOR_EMAIL": "ops@example.net",
    "GIT_COMMITTER_NAME": "ops",
    "GIT_COMMITTER_EMAIL": "ops@example.net",
}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Upstream:
    """A work repository (the operator's) whose commits the remote serves."""

    work: Path
    good_key: Path
    bad_key: Path
    signers: Path

    def commit(self, files: dict[str, str], key: Path | None) -> str:
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git("add", "-A", cwd=self.work)
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S"]
        git(*(sign if key else ["commit"]), "-q", "--allow-empty", "-m", "c", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


def make_upstream(tmp_path: Path) -> Upstream:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    for name in ("good", "bad"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(keys / name)],
            check=True,
        )
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"ops@example.net {(keys / 'good.pub').read_text()}")
    signers.chmod(0o644)
    work = tmp_path / "served" / "fleet"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    return Upstream(work, keys / "good", keys / "bad", signers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(upstream: Upstream) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    # git-daemon itself, not `git daemon`: the git wrapper would leave it running at a kill.
    daemon = git("--exec-path", cwd=upstream.work) + "/git-daemon"
    proc = subprocess.Popen(
        [daemon, "--export-all", "--reuseaddr", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={upstream.work.parent}", str(upstream.work.parent)],
        env=GIT_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "git daemon did not listen"
            time.sleep(0.05)
    yield f"git://127.0.0.1:{port}/fleet", proc
    proc.kill()
    proc.wait()
