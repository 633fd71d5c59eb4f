"""Registry credentials from auth.json, in the format of Docker's own config.json.

    {"auths": {"registry.example:5000": {"auth": "base64(user:password)"},
               "https://index.docker.io/v1/": {"username": "u", "password": "p"}},
     "credHelpers": {"123.dkr.ecr.eu-west-1.amazonaws.com": "ecr-login"},
     "credsStore": "pass"}

The file is root-only (mode 0600 or stricter, owned by root): it is read through
read_trusted with the owner and mode checks of every config file, and refused when group
or others may read it (unless strict_modes is false). Nothing of its contents ever
appears in an error message: errors name the file, the registry and what is wrong.

A pull of `host/repo:tag` uses the entry for `host`: its credential helper
(`credHelpers`), else its `auths` entry, else `credsStore`, else none (an anonymous
pull). An image with no registry host in its name (`x:1`, `library/x`) is Docker Hub's,
whose entry may be written `docker.io`, `index.docker.io` or
`https://index.docker.io/v1/` (what `docker login` writes). Keys of `auths` may carry a
scheme and a path (`https://host:5000/v2/`): only the host counts. Other keys of
config.json (psFormat, HttpHeaders, ...) are ignored. The helpers it names are found
on PATH and checked when the file is read (healerd.config.credhelpers).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from healerd.config.credhelpers import resolve_helpers
from healerd.config.trust import FileRefused, read_trusted
from healerd.model import RegistryAuth

DEFAULT_NAME = "auth.json"
MAX_AUTH_FILE = 256 * 1024
DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)
_HELPER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class RegistryAuthError(Exception):
    """auth.json cannot be used; the message names the file and why, never a secret."""


def registry_of(image: str) -> str:
    """The registry host of an image reference, as Docker resolves it: the first path
    component when it has a '.' or ':' or is `localhost`, else Docker Hub."""
    name = image.split("@", 1)[0]
    first, slash, _ = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB if first in _HUB_ALIASES else first
    return DOCKER_HUB


def _host_of_key(key: str) -> str:
    """`https://host:5000/v2/` -> `host:5000`; Docker Hub's spellings -> docker.io."""
    host = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", key.strip()).split("/", 1)[0]
    return DOCKER_HUB if host in _HUB_ALIASES else host


@dataclass(frozen=True)
class RegistryCredentials:
    """What auth.json says, per registry host. Empty: every pull is anonymous."""

    auths: Mapping[str, RegistryAuth] = field(default_factory=dict)
    helpers: Mapping[str, str] = field(default_factory=dict)
    store: str = ""
    source: str = ""  # the file it came from ("" when there was none)
    # Each helper's program as found and checked when the file was read (credhelpers),
    # or why it cannot be run.
    helper_paths: Mapping[str, str] = field(default_factory=dict)
    helper_errors: Mapping[str, str] = field(default_factory=dict)

    def for_image(self, image: str) -> RegistryAuth | None:
        host = registry_of(image)
        helper = self.helpers.get(host)
        if helper:
            return self._helper(host, helper)
        entry = self.auths.get(host)
        if entry is not None:
            return entry
        return self._helper(host, self.store) if self.store else None

    def _helper(self, host: str, name: str) -> RegistryAuth:
        path, error = self.helper_paths.get(name, ""), self.helper_errors.get(name, "")
        return RegistryAuth(host, helper=name, helper_path=path, helper_error=error)

    def helper_names(self) -> set[str]:
        return {*self.helpers.values(), self.store} - {""}

    def summary(self) -> str:
        """For the log: which registries have credentials (never the credentials)."""
        parts = [*sorted(self.auths), *(f"{h} (helper)" for h in sorted(self.helpers))]
        if self.store:
            parts.append(f"others through credsStore {self.store}")
        return ", ".join(parts) or "none"


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise RegistryAuthError(f"{where} must be a string")
    return value


def _decoded_auth(value: object, where: str) -> tuple[str, str]:
    try:
        raw = base64.b64decode(_text(value, where).strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise RegistryAuthError(f"{where} is not base64 of user:password") from None
    user, colon, password = raw.partition(":")
    if not colon or not user:
        raise RegistryAuthError(f"{where} is not base64 of user:password") from None
    return user, password


def _entry(key: str, value: object) -> RegistryAuth | None:
    where = f"auths[{key!r}]"
    if not isinstance(value, dict):
        raise RegistryAuthError(f"{where} must be an object")
    host = _host_of_key(key)
    token = _text(value.get("identitytoken", ""), f"{where}.identitytoken")
    if value.get("auth"):
        user, password = _decoded_auth(value["auth"], f"{where}.auth")
    else:
        user = _text(value.get("username", ""), f"{where}.username")
        password = _text(value.get("password", ""), f"{where}.password")
        if password and not user:
            raise RegistryAuthError(f"{where} has a password but no username")
    if not (user or token):
        return None  # an empty entry (a credsStore keeps the secret): nothing inline
    return RegistryAuth(host, username=user, password=password, identity_token=token)


def _helper_name(value: object, where: str) -> str:
    name = _text(value, where)
    if name and not _HELPER_RE.fullmatch(name):
        raise RegistryAuthError(f"{where} must name a helper docker-credential-NAME")
    return name


def parse_registry_auth(raw: bytes, source: str = "") -> RegistryCredentials:
    """auth.json's bytes -> credentials; raises RegistryAuthError naming what is wrong
    (the caller adds the file name). A JSON error is reported by position only: a
    parser's message could quote the secret it choked on."""
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise RegistryAuthError("not valid UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RegistryAuthError(f"not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise RegistryAuthError("must be a JSON object like Docker's config.json")
    auths = data.get("auths", {})
    helpers = data.get("credHelpers", {})
    if not isinstance(auths, dict):
        raise RegistryAuthError("auths must be an object of registry -> credentials")
    if not isinstance(helpers, dict):
        raise RegistryAuthError("credHelpers must be an object of registry -> helper name")
    entries: dict[str, RegistryAuth] = {}
    for key, value in auths.items():
        entry = _entry(str(key), value)
        if entry is not None:
            entries[entry.registry] = entry
    named = {
        _host_of_key(str(k)): _helper_name(v, f"credHelpers[{str(k)!r}]")
        for k, v in helpers.items()
    }
    store = _helper_name(data.get("credsStore", ""), "credsStore")
    return RegistryCredentials(entries, {h: n for h, n in named.items() if n}, store, source)


def auth_file(config_dir: Path, setting: Path | None) -> Path:
    """Where auth.json is: the `registry_auth` setting, else CONFIG_DIR/auth.json."""
    return setting if setting is not None else config_dir / DEFAULT_NAME


def load_registry_auth(path: Path, *, strict: bool) -> RegistryCredentials:
    """The credentials in `path`, with the credential helpers it names found and checked
    (healerd.config.credhelpers; a helper that cannot be run is in `helper_errors`); a
    missing file means none. Raises RegistryAuthError with the file and the reason
    (untrusted, readable by others, unreadable, malformed)."""
    try:
        raw = read_trusted(
            path, "registry credentials file", strict=strict, limit=MAX_AUTH_FILE, private=True
        )
    except FileNotFoundError:
        return RegistryCredentials()
    except FileRefused as exc:
        raise RegistryAuthError(str(exc)) from None
    except OSError as exc:
        raise RegistryAuthError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        found = parse_registry_auth(raw, str(path))
    except RegistryAuthError as exc:
        raise RegistryAuthError(f"{path}: {exc}") from None
    paths, errors = resolve_helpers(found.helper_names(), strict=strict)
    return dataclasses.replace(found, helper_paths=paths, helper_errors=errors)


__all__ = [
    "DEFAULT_NAME",
    "DOCKER_HUB",
    "RegistryAuthError",
    "RegistryCredentials",
    "auth_file",
    "load_registry_auth",
    "parse_registry_auth",
    "registry_of",
]
