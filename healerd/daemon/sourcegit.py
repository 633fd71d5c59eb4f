"""The git side of one git source: fetch the tip of its ref into a bare repository, check
the commit's signature, and check its directory out into a read-only tree.

All of it in `state_dir/sources/<name>/` (root's, 0700): `repo.git` (a bare, shallow
repository: only the tip is fetched), `trees/<commit>/` (the source's directory of that
commit, files 0444, written to a temporary directory and renamed, so a tree is whole or
absent). The commands are healerd.daemon.gitrun's; what the operator's files hold (the
token, the key) never reaches a message: `scrub` takes every secret out first.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from healerd.config.sourcekeys import GitSource, masked_git_url
from healerd.config.trust import read_trusted
from healerd.daemon.gitrun import GIT, GitTimeout, Runner, base_env, config_env, ssh_command

TIP = "refs/healerd/tip"
# The most a source's directory may hold: it is a conf.d, not a data set.
MAX_FILES = 5000
MAX_BYTES = 64 << 20
_SECRET_LIMIT = 64 << 10


class FetchFailed(Exception):
    """The remote or the local repository failed; nothing is said against the commit."""


class Refused(Exception):
    """The commit itself is refused (its signature, its directory): remembered."""


@dataclass(frozen=True)
class Tip:
    commit: str
    time: float


def summary(text: str) -> str:
    """git's last words, one line: its last three lines that say something."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return "; ".join(lines[-3:])[:400]


class SourceGit:
    def __init__(
        self,
        conf: GitSource,
        root: Path,
        runner: Runner,
        *,
        strict: bool = True,
        hostname: str | None = None,
    ) -> None:
        self.conf = conf
        self.root = root
        self.repo = root / "repo.git"
        self.trees = root / "trees"
        self.run_ = runner
        self.strict = strict
        self.subdir = conf.subdir(hostname or socket.gethostname())
        self._secrets: list[str] = []

    # -- running git ----------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """`text` with every secret of the source's credentials (and the URL's) masked."""
        text = text.replace(self.conf.url, masked_git_url(self.conf.url))
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def _git(
        self,
        args: list[str],
        deadline: float,
        pairs: list[tuple[str, str]] | None = None,
        *,
        index: Path | None = None,
        gnupg: Path | None = None,
    ) -> tuple[int, str, str]:
        """(exit code, output, scrubbed errors); FetchFailed past the deadline."""
        env = base_env(self.conf.scheme, gnupg or self.root / "gnupg")
        env.update(config_env([("core.symlinks", "false"), *(pairs or [])]))
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        try:
            ran = self.run_([GIT, *args], env=env, timeout=deadline - time.monotonic(), cwd=None)
        except GitTimeout as exc:
            raise FetchFailed(f"git {_verb(args)} {exc}") from None
        return ran.code, ran.out, self.scrub(ran.err)

    def _must(self, args: list[str], deadline: float, what: str, **kw: str) -> str:
        code, out, err = self._git(args, deadline, list(kw.items()) or None)
        if code != 0:
            raise FetchFailed(f"{what}: {summary(err) or f'git exited with {code}'}")
        return out

    def _trusted(self, path: str, what: str, private: bool = False) -> bytes:
        """A file the operator named, checked as a config file is (owner, mode, dirs)."""
        return read_trusted(
            Path(path), what, strict=self.strict, limit=_SECRET_LIMIT, private=private
        )

    def _fetch_auth(self) -> list[tuple[str, str]]:
        """The transport's config, credentials included (read again at each fetch)."""
        pairs = [("http.lowSpeedLimit", "1000"), ("http.lowSpeedTime", "30")]
        c = self.conf
        if c.known_hosts:
            self._trusted(c.known_hosts, "known hosts file")
        if c.scheme == "ssh" or not c.credentials:
            if c.credentials:
                self._trusted(c.credentials, "git credentials", private=True)
            return pairs
        lines = self._trusted(c.credentials, "git credentials", private=True).decode().split()
        if not lines:
            raise FetchFailed(f"git credentials {c.credentials} is empty")
        token = lines[0]
        user, _, password = token.partition(":") if ":" in token else ("git", "", token)
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._secrets = [s for s in (token, password, basic) if len(s) >= 4]
        # Never sent on to another host: no redirects while a token rides along.
        return [*pairs, ("http.extraHeader", f"Authorization: Basic {basic}"),
                ("http.followRedirects", "false")]  # fmt: skip

    # -- fetch, verify, check out ---------------------------------------------------

    def fetch(self, deadline: float) -> Tip:
        """The commit at the tip of `ref` on the remote, and its committer's time."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.root / "gnupg").mkdir(mode=0o700, exist_ok=True)
        if not (self.repo / "HEAD").exists():
            self._must(["init", "--quiet", "--bare", str(self.repo)], deadline, "git init")
        pairs = self._fetch_auth()
        if self.conf.scheme == "ssh":
            key = self.conf.credentials or None
            pairs.append(("core.sshCommand", ssh_command(key, self.conf.known_hosts)))
        code, _, err = self._git(
            [f"--git-dir={self.repo}", "fetch", "--quiet", "--no-tags", "--depth=1",
             "--no-recurse-submodules", "--", self.conf.url, f"+{self.conf.ref}:{TIP}"],
            deadline, pairs,
        )  # fmt: skip
        if code != 0:
            raise FetchFailed(f"fetch of {self.conf.ref} failed: {summary(err) or code}")
        commit = self._must(
            [f"--git-dir={self.repo}", "rev-parse", "--verify", "--quiet", f"{TIP}^{{commit}}"],
            deadline,
            f"{self.conf.ref} is not a commit",
        ).strip()
        when = self._must(
            [f"--git-dir={self.repo}", "show", "-s", "--format=%ct", commit], deadline, "git show"
        )
        return Tip(commit, float(when.strip() or 0))

    def verify(self, commit: str, deadline: float) -> None:
        """Raises Refused unless `commit` is signed by an allowed key (verify: none: never)."""
        v = self.conf.verify
        if v.kind == "none":
            return
        args = [f"--git-dir={self.repo}", "verify-commit", commit]
        if v.kind == "ssh":
            self._trusted(v.file, "allowed signers file")
            pairs = [("gpg.ssh.allowedSignersFile", v.file), ("gpg.minTrustLevel", "fully")]
            code, _, err = self._git(args, deadline, pairs)
        else:
            code, err = self._verify_gpg(args, deadline)
        if code != 0:
            said = summary(err)
            raise Refused(
                f"commit {commit[:12]} is not signed by an allowed key"
                + (f" ({said})" if said else " (no signature)")
            )

    def _verify_gpg(self, args: list[str], deadline: float) -> tuple[int, str]:
        """gpg with a keyring of the allowed keys alone (the checked file's bytes), made
        anew for each check; no import (which wants gpg-agent), no agent at all."""
        raw = self._trusted(self.conf.verify.file, "gpg keys file")
        keys = self.root / "gnupg-keys"
        remove_tree(keys)
        keys.mkdir(mode=0o700)
        ring = keys / "allowed.gpg"
        try:
            if raw.lstrip().startswith(b"-----BEGIN PGP"):
                (keys / "allowed.asc").write_bytes(raw)
                ran = self.run_(
                    ["gpg", "--batch", "--no-autostart", "--homedir", str(keys), "--dearmor",
                     "--output", str(ring), str(keys / "allowed.asc")],
                    env=base_env(self.conf.scheme, keys), timeout=deadline - time.monotonic(),
                    cwd=None,
                )  # fmt: skip
                if ran.code != 0:
                    raise FetchFailed(f"gpg keys file not read: {summary(ran.err)}")
            else:
                ring.write_bytes(raw)
            (keys / "gpg.conf").write_text(f"no-autostart\nno-default-keyring\nkeyring {ring}\n")
            code, _, err = self._git(args, deadline, gnupg=keys)
            return code, err
        finally:
            remove_tree(keys)

    def checkout(self, commit: str, deadline: float) -> Path:
        """`trees/<commit>/`: the source's directory of `commit`, whole, read-only."""
        final = self.trees / commit
        if final.is_dir():
            return final
        spec = f"{commit}:{self.subdir}" if self.subdir else f"{commit}^{{tree}}"
        where = f"{self.subdir}/" if self.subdir else "the top"
        code, out, _ = self._git([f"--git-dir={self.repo}", "cat-file", "-t", spec], deadline)
        if code != 0 or out.strip() != "tree":
            raise Refused(f"commit {commit[:12]} has no directory {where}")
        self._check_size(spec, deadline)
        self.trees.mkdir(mode=0o700, exist_ok=True)
        tmp = self.trees / f".new-{commit}-{os.getpid()}"
        index = self.root / "index.tmp"
        remove_tree(tmp)
        tmp.mkdir(mode=0o700)
        try:
            for args in (
                ["read-tree", spec],
                [f"--work-tree={tmp}", "checkout-index", "--all", "--force"],
            ):
                code, _, err = self._git([f"--git-dir={self.repo}", *args], deadline, index=index)
                if code != 0:
                    raise FetchFailed(f"checkout failed: {summary(err) or code}")
            read_only(tmp)
            os.rename(tmp, final)
        finally:
            remove_tree(tmp)
            with contextlib.suppress(FileNotFoundError):
                index.unlink()
        return final

    def _check_size(self, spec: str, deadline: float) -> None:
        out = self._must(
            [f"--git-dir={self.repo}", "ls-tree", "-r", "-l", "-z", spec], deadline, "git ls-tree"
        )
        entries = [e for e in out.split("\0") if e]
        sizes = [e.split(None, 4)[3] for e in entries if len(e.split(None, 4)) > 4]
        total = sum(int(s) for s in sizes if s.isdigit())
        if len(entries) > MAX_FILES or total > MAX_BYTES:
            raise Refused(
                f"{len(entries)} files, {total} bytes: more than a conf.d holds "
                f"(at most {MAX_FILES} files, {MAX_BYTES >> 20} MiB)"
            )


def _verb(args: list[str]) -> str:
    """The git command of `args` (the first word that is not an option)."""
    return next((a for a in args if not a.startswith("-")), "")


def read_only(tree: Path) -> None:
    """Files 0444 (0555 when executable), directories 0555: a snapshot, not a work tree."""
    for here, dirs, files in os.walk(tree):
        for name in files:
            p = Path(here) / name
            mode = os.lstat(p).st_mode
            if stat.S_ISREG(mode):
                os.chmod(p, 0o555 if mode & 0o111 else 0o444)
        for name in dirs:
            os.chmod(Path(here) / name, 0o555)
    os.chmod(tree, 0o555)


def remove_tree(tree: Path) -> None:
    """A tree gone, read-only directories included; nothing when it is not there."""
    if not tree.exists():
        return
    for here, dirs, _ in os.walk(tree):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(Path(here) / name, 0o700)
    with contextlib.suppress(OSError):
        os.chmod(tree, 0o700)
    shutil.rmtree(tree, ignore_errors=True)


__all__ = ["MAX_BYTES", "MAX_FILES", "FetchFailed", "Refused", "SourceGit", "Tip", "remove_tree"]
