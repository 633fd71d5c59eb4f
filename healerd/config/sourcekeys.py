"""The `sources:` list of healerd.yaml: configuration fetched from git repositories.

Each source names a repository, a branch or tag, the directory in it whose files (and
project directories) become part of conf.d, how often to fetch, whose signatures a
commit must carry and the file that holds the credentials to fetch with. The fetching
and the checks of signatures are healerd.daemon.sources'; this module only checks what
healerd.yaml says, so that a mistake is refused at start with its file, line and field.

Plain transports (`git://`, `http://`) are taken only with a signature check: the
signature is what makes the content trustworthy, and without one anyone on the path
could hand healerd containers to run as root. A password in the URL is refused: the
credentials belong in their own root-only file, never shown (`credentials`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At, Key
from healerd.config.units import format_duration, parse_duration
from healerd.config.yamlload import LineDict, LineList

MAX_SOURCES = 16
SCHEMES = ("https", "ssh", "file", "http", "git")
# Transports that neither authenticate the server nor protect the content on the way.
PLAIN = ("http", "git")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# A branch or tag name as `git check-ref-format --branch` takes it, conservatively.
_REF = re.compile(r"(?!-)(?!.*\.\.)(?!.*//)(?!.*@\{)[A-Za-z0-9._/+-]{1,200}(?<![./])")
# %H: the host name (uname -n), %l: its first label, %%: a percent sign.
PLACEHOLDERS = ("%H", "%l", "%%")
_MIN_INTERVAL = 10.0


@dataclass(frozen=True)
class SourceVerify:
    """Whose signatures count: `kind` "ssh" (an allowed signers file), "gpg" (a file of
    public keys) or "none" (unsigned commits are applied), and the file."""

    kind: str = "none"
    file: str = ""


@dataclass(frozen=True)
class GitSource:
    """One `sources:` entry; durations in seconds, `path` relative ("" is the root)."""

    name: str
    url: str
    ref: str = "main"
    path: str = ""
    interval: float = 60.0
    timeout: float = 120.0
    verify: SourceVerify = SourceVerify()
    credentials: str = ""
    known_hosts: str = ""

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower()

    def subdir(self, hostname: str) -> str:
        """`path` with %H (the host name), %l (its first label) and %% filled in."""
        short = hostname.split(".", 1)[0]
        parts = re.split(r"(%[Hl%])", self.path)
        fill = {"%H": hostname, "%l": short, "%%": "%"}
        return "".join(fill.get(p, p) for p in parts).strip("/")


def masked_git_url(url: str) -> str:
    """The URL without a password or token (`https://***@host/...`); user names of
    ssh:// stay (they are not secrets). Never raises."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{url.split(':', 1)[0][:20]}://***"
    if parts.password is None and (parts.username is None or parts.scheme == "ssh"):
        return url
    user = f"{parts.username}@" if parts.scheme == "ssh" and parts.username else "***@"
    host = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=user + host).geturl()


def _default_name(url: str) -> str:
    base = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return base if _NAME.fullmatch(base) else "source"


def _url(value: object, at: At) -> str | None:
    if not isinstance(value, str) or "://" not in value:
        at.error(
            f"is required: a repository URL (https://, ssh://, file://), not {describe(value)}"
        )
        return None
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        at.error(f"is not a URL: {exc}")
        return None
    if parts.scheme.lower() not in SCHEMES:
        at.error(f"scheme {parts.scheme!r} is not one of {', '.join(SCHEMES)}")
        return None
    if parts.password is not None or (parts.username and parts.scheme in ("https", "http")):
        at.error(
            "must not hold credentials (they would be shown and logged): put the token in "
            "a root-only file and name it in `credentials`"
        )
        return None
    if parts.scheme != "file" and not parts.hostname:
        at.error("names no host")
        return None
    return value


def _verify(value: object, at: At) -> SourceVerify | None:
    if value == "none":
        return SourceVerify()
    if not isinstance(value, dict) or len(value) != 1:
        at.error(
            "must be {allowed_signers: PATH}, {gpg_keys: PATH} or the word none (applies "
            f"unsigned commits), not {describe(value)}"
        )
        return None
    ((key, path),) = value.items()
    where = at.key(value, key) if isinstance(value, LineDict) else at.child(key, at.line)
    kinds = {"allowed_signers": "ssh", "gpg_keys": "gpg"}
    if key not in kinds:
        where.error(f"{unknown_key_reason(key, kinds)}: allowed_signers or gpg_keys")
        return None
    if not isinstance(path, str) or not path.startswith("/"):
        where.error(f"must be an absolute path, not {describe(path)}")
        return None
    return SourceVerify(kinds[key], path)


def _subpath(value: object, at: At) -> str | None:
    if not isinstance(value, str):
        at.error(f"must be a directory of the repository, not {describe(value)}")
        return None
    if value.startswith("/") or ".." in PurePosixPath(value).parts or "\0" in value:
        at.error("must be a relative directory of the repository, without ..")
        return None
    if any(m not in PLACEHOLDERS for m in re.findall(r"%.?", value)):
        at.error("knows the placeholders %H (host name), %l (its first label) and %% only")
        return None
    return value


def _duration(value: object, at: At, minimum: float) -> float | None:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        at.error(str(exc))
        return None
    if seconds < minimum:
        at.error(f"must be at least {format_duration(minimum)}")
        return None
    return seconds


def _path(value: object, at: At) -> str | None:
    if not isinstance(value, str) or not value.startswith("/"):
        at.error(f"must be an absolute path, not {describe(value)}")
        return None
    return value


def _fields(body: LineDict | dict[Any, Any], at: At) -> dict[str, Any] | None:
    """Each key's checked value; None when one was refused."""

    def where(key: str) -> At:
        return at.key(body, key) if isinstance(body, LineDict) else at.child(key, at.line)

    before = len(at.errors)
    for key in body:
        if key not in _CHILDREN:
            where(str(key)).error(unknown_key_reason(key, _CHILDREN))
    out: dict[str, Any] = {"url": _url(body.get("git"), where("git"))}
    ref = body.get("ref", "main")
    if not (isinstance(ref, str) and _REF.fullmatch(ref)):
        where("ref").error(f"must be a branch or tag name, not {describe(ref)}")
    out["ref"] = ref
    checks: dict[str, Any] = {
        "path": _subpath,
        "interval": lambda v, a: _duration(v, a, _MIN_INTERVAL),
        "timeout": lambda v, a: _duration(v, a, 1.0),
        "credentials": _path,
        "known_hosts": _path,
    }
    for key, check in checks.items():
        if body.get(key) is not None:
            out[key] = check(body[key], where(key))
    if "verify" not in body:
        where("verify").error(
            "is required: {allowed_signers: PATH}, {gpg_keys: PATH}, or none written out "
            "to apply unsigned commits"
        )
    else:
        out["verify"] = _verify(body["verify"], where("verify"))
    return out if len(at.errors) == before else None


def _source(value: object, at: At) -> GitSource | None:
    if not isinstance(value, dict):
        at.error(f"must be a mapping with git, ref, path, interval, verify, not {describe(value)}")
        return None
    out = _fields(value, at)
    if out is None:
        return None
    name = value.get("name", _default_name(out["url"]))
    if not (isinstance(name, str) and _NAME.fullmatch(name)):
        at.here("name").error("must be a short name: letters, digits, _ . -")
        return None
    source = GitSource(name=name, **out)
    if source.scheme in PLAIN and source.verify.kind == "none":
        at.here("verify").error(
            f"{source.scheme}:// neither authenticates the server nor protects what it "
            "sends: only with a signature check (allowed_signers or gpg_keys)"
        )
        return None
    return source


def check_sources(value: Any, at: At) -> tuple[GitSource, ...] | None:
    """The list as healerd.yaml gives it (or already built, from check_settings)."""
    if isinstance(value, tuple) and all(isinstance(s, GitSource) for s in value):
        return value
    if value is None:
        return ()
    if not isinstance(value, list):
        at.error(f"must be a list of sources ({{git: URL, ...}}), not {describe(value)}")
        return None
    if len(value) > MAX_SOURCES:
        at.error(f"has {len(value)} sources; at most {MAX_SOURCES}")
        return None
    before = len(at.errors)
    found = []
    for i, item in enumerate(value):
        where = (
            at.item(value, i) if isinstance(value, LineList) else at.child(i, at.line, index=True)
        )
        source = _source(item, where)
        if source is not None:
            found.append(source)
    names = [s.name for s in found]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        at.error(f"two sources are named {dup!r}; give each its own name")
    return tuple(found) if len(at.errors) == before else None


SOURCE_CHILDREN: tuple[Key, ...] = (
    Key(
        "git",
        "repository URL",
        "The repository: `https://`, `ssh://` or `file://` (`git://` and `http://` only "
        "with a signature check). No credentials in it: see `credentials`.",
        "https://git.example.net/edge/site-7.git",
        default_doc="required",
    ),
    Key(
        "name",
        "short name",
        "How status, logs and `healerctl sync NAME` name the source, and its directory in "
        "state_dir/sources; default: the repository's name without `.git`.",
        "site-7",
        default_doc="the repository's name",
    ),
    Key("ref", "branch or tag", "The branch or tag to follow.", "stable", default="main"),
    Key(
        "path",
        "directory in the repository",
        "The directory whose files (`*.yaml`) and project directories become part of "
        "conf.d; default: the top. `%H` is the host name (`uname -n`), `%l` its first "
        "label, `%%` a percent sign, so that one repository serves a fleet.",
        "hosts/%H/",
        default_doc="the top",
    ),
    Key(
        "interval",
        "duration, at least 10s",
        "How often to fetch; `healerctl sync` fetches at once.",
        "5m",
        default=60.0,
    ),
    Key(
        "timeout",
        "duration",
        "Longest one fetch may take; then git and its children are killed and the fetch "
        "counts as failed (the last good commit stays).",
        "30s",
        default=120.0,
    ),
    Key(
        "verify",
        "{allowed_signers: PATH} | {gpg_keys: PATH} | none",
        "Required. Whose signatures a commit must carry to be applied: an allowed "
        "signers file in ssh-keygen's format (commits signed with `gpg.format=ssh`), or "
        "a file of OpenPGP public keys; `none`, written out, applies unsigned commits. "
        "A commit not signed by an allowed key is refused and the last good one stays.",
        "{allowed_signers: /etc/healerd/allowed_signers}",
        default_doc="required",
    ),
    Key(
        "credentials",
        "absolute path or null",
        "A root-only file to fetch with: an SSH private key for `ssh://`, or a token "
        "(`TOKEN` or `USER:TOKEN`, HTTP basic auth) for `https://`. Checked as a config "
        "file (owner, mode 0600, directories); never shown in status, events or logs.",
        "/etc/healerd/git-token",
        default_doc="none",
    ),
    Key(
        "known_hosts",
        "absolute path or null",
        "The SSH known hosts file for `ssh://`; default: ssh's own, of which the unit "
        "leaves /etc/ssh/ssh_known_hosts (root's home is hidden: ProtectHome). Unknown "
        "hosts are refused.",
        "/etc/healerd/known_hosts",
        default_doc="ssh's own",
    ),
)
_CHILDREN = tuple(k.name for k in SOURCE_CHILDREN)

__all__ = [
    "MAX_SOURCES",
    "SOURCE_CHILDREN",
    "GitSource",
    "SourceVerify",
    "check_sources",
    "masked_git_url",
]
