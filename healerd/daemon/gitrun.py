"""Running Debian's `git` for the git sources (healerd.daemon.sources).

Why the `git` binary and not a Python library: git's own transports (https with the
system's CAs and proxies, ssh with the operator's known hosts, file://) and its own
signature checks (`git verify-commit`, with `gpg.format=ssh` and
`gpg.ssh.allowedSignersFile` for ssh-keygen's signatures, or gpg's) are what operators
already test their repositories with; no well-kept pure-Python library verifies ssh
signatures, and dulwich's transports would be a second implementation to trust.

Every run has a deadline: git starts in a session of its own, and when the deadline
passes the whole process group (git, ssh, git-remote-https) is killed, so a slow or dead
remote costs a source's own thread one timeout and never more. git gets a small
environment of its own: no system or user config, no terminal prompts, only the
source's transport allowed, an empty GnuPG home (root's keyring is not an allowed key).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

GIT = "git"
# What git may print that healerd keeps: error messages are short, a tree listing not.
MAX_OUTPUT = 8 << 20


class GitTimeout(Exception):
    """The run passed its deadline; its processes were killed."""


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


class Runner(Protocol):
    def __call__(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None
    ) -> Ran: ...


def run(
    argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> Ran:
    """`argv` with `env` alone, killed with its children at `timeout` (GitTimeout)."""
    if timeout <= 0:
        raise GitTimeout("no time left")
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise GitTimeout(f"took longer than {timeout:g}s: killed") from None
    finally:
        if proc.poll() is None:  # an exception of another kind: leave nothing behind
            _kill(proc)
    text = out[:MAX_OUTPUT].decode("utf-8", "replace")
    return Ran(proc.returncode, text, err[-65536:].decode("utf-8", "replace"))


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """git's whole process group killed (before git is reaped, so that its id still names
    the group), and the pipes closed unread: a child that left the group and holds them
    open cannot hold us."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def base_env(scheme: str, gnupg_home: Path) -> dict[str, str]:
    """git's whole environment: none of healerd's own (its unit's credentials stay home)."""
    allowed = {"https": "https", "http": "http", "ssh": "ssh", "file": "file", "git": "git"}
    return {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C",
        "HOME": str(gnupg_home.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_ALLOW_PROTOCOL": allowed.get(scheme, "none"),
        "GNUPGHOME": str(gnupg_home),
    }


def ssh_command(key: str | None, known_hosts: str | None) -> str:
    """GIT_SSH_COMMAND: batch mode (no prompt), known hosts only, the key given alone."""
    parts = [
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=15",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=2",
    ]
    if known_hosts:
        parts += ["-o", f"UserKnownHostsFile={known_hosts}"]
    if key:
        parts += ["-o", "IdentitiesOnly=yes", "-i", key]
    return " ".join(_quote(p) for p in parts)


def _quote(word: str) -> str:
    """Shell quoting for GIT_SSH_COMMAND (git runs it through sh)."""
    if word and all(c.isalnum() or c in "-_=./:@" for c in word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """git config given through the environment (GIT_CONFIG_COUNT), not the command line:
    a process's environment is its owner's alone to read, its arguments everyone's."""
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


__all__ = ["GIT", "GitTimeout", "Ran", "Runner", "base_env", "config_env", "run", "ssh_command"]
