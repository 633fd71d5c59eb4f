"""The `notifications:` list of healerd.yaml: where healerd tells what happened, and which
of it. The URLs are Apprise's (https://github.com/caronc/apprise/wiki): one syntax for
ntfy, Gotify, e-mail, Slack, Matrix, Telegram, MQTT, webhooks and a hundred more.

A URL holds credentials (a password, a token, a secret topic), so it is never shown:
everywhere healerd names a target it names it by `name`, or by `masked_url`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At, Key
from healerd.config.yamlload import LineDict, LineList
from healerd.vocabulary import DEFAULT_NOTICES, NoticeKind

MAX_TARGETS = 32
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")


@dataclass(frozen=True)
class NotifyTarget:
    """One target: its Apprise URL, the name it is shown by, what it is sent (the kinds
    of NoticeKind) and of which services (None: every one)."""

    url: str
    name: str
    events: frozenset[NoticeKind] = DEFAULT_NOTICES
    services: frozenset[str] | None = None

    def wants(self, kind: NoticeKind, service: str) -> bool:
        """A notice not of one service (the engine, a config file) goes to every target
        that wants its kind."""
        if kind not in self.events:
            return False
        return not service or self.services is None or service in self.services


def masked_url(url: str) -> str:
    """`ntfy://ntfy.example.net/***`: the scheme, and the host where it looks like one
    (Telegram's and Discord's "host" is a token); no user, password, path or query."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return f"{url.split(':', 1)[0][:20]}://***"
    shown = host if _HOST.fullmatch(host) and ("." in host or host == "localhost") else "***"
    if shown != "***" and port is not None:
        shown += f":{port}"
    user = "***@" if parts.username or parts.password else ""
    rest = "/***" if parts.path.strip("/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{user}{shown}{rest}"


def secrets_of(url: str) -> list[str]:
    """The parts of `url` that must never be shown: the URL, its user and password, each
    path segment and query value, percent-decoded too (longest first, so that a part
    inside another is not left half-masked)."""
    out = {url}
    try:
        parts = urlsplit(url)
        out.update(p for p in (parts.username, parts.password) if p)
        if not _HOST.fullmatch(parts.hostname or "") or "." not in (parts.hostname or "."):
            out.add(parts.netloc)
        out.update(seg for seg in parts.path.split("/") if seg)
        for pair in parts.query.split("&"):
            out.add(pair.partition("=")[2])
    except ValueError:
        pass
    # As written and as a target's library reads them (and may echo them): `p%40ss` is
    # the password `p@ss`, `a+b` in a query the value `a b`.
    out |= {unquote(s) for s in out} | {unquote_plus(s) for s in out}
    return sorted((s for s in out if len(s) >= 3), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` (an answer, an error) with every secret part of `url` replaced by ***."""
    for secret in secrets_of(url):
        text = text.replace(secret, "***")
    return text


def quiet_apprise() -> logging.Logger:
    """Apprise's logger, kept out of healerd's log and stderr (it logs parts of the URLs
    it tries or refuses): its records reach only the handlers a send adds
    (healerd.daemon.apprisesend). Set once and left so: a level lowered and put back
    around a call dropped the log of a send running beside it (its answer then said
    "refused, without a reason"), and two such calls overlapping could leave it lowered."""
    quiet = logging.getLogger("apprise")
    quiet.propagate = False
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    quiet.setLevel(logging.INFO)
    return quiet


def _apprise_knows(url: str) -> bool:
    """Whether Apprise can make a service of `url` (its scheme, its required parts)."""
    import apprise  # loads 100+ plugins (0.1 s): only when a target is declared

    quiet_apprise()  # it logs the URL it refuses
    return apprise.Apprise.instantiate(url) is not None


def _events(value: object, at: At) -> frozenset[NoticeKind] | None:
    if not isinstance(value, list) or not value:
        at.error(f"must be a list of {', '.join(NoticeKind)}, not {describe(value)}")
        return None
    kinds: set[NoticeKind] = set()
    for i, item in enumerate(value):
        try:
            kinds.add(NoticeKind(item))
        except ValueError:
            where = at.item(value, i) if isinstance(value, LineList) else at
            what = repr(item) if isinstance(item, str) else describe(item)
            where.error(f"{what} is not a kind of notice; one of {', '.join(NoticeKind)}")
    return frozenset(kinds)


def _services(value: object, at: At) -> frozenset[str] | None:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) for s in value):
        at.error(f"must be a list of service names, not {describe(value)}")
        return None
    return frozenset(value)


def _target(value: object, index: int, at: At) -> NotifyTarget | None:
    if isinstance(value, str):
        alone = LineDict(at.line, at.column)
        alone["url"] = value
        value = alone
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with a url (or a URL alone), not {describe(value)}")
        return None
    for key in value:
        if key not in _CHILDREN:
            at.key(value, key).error(unknown_key_reason(key, _CHILDREN))
    url = value.get("url")
    if not isinstance(url, str) or "://" not in url:
        at.key(value, "url").error(
            "is required: an Apprise URL such as ntfy://ntfy.example.net/TOPIC, not "
            + ("a value of another type" if url is not None else "nothing")
        )
        return None
    if not _apprise_knows(url):
        at.key(value, "url").error(
            f"Apprise cannot send to {masked_url(url)}: an unknown scheme or a part missing "
            "(see https://github.com/caronc/apprise/wiki)"
        )
        return None
    name = value.get("name", f"{index + 1}:{masked_url(url)}")
    if "name" in value and not (isinstance(name, str) and _NAME.fullmatch(name)):
        at.key(value, "name").error("must be a short name: letters, digits, _ . : -")
        return None
    events = _events(value["events"], at.key(value, "events")) if "events" in value else None
    services = (
        _services(value["services"], at.key(value, "services")) if "services" in value else None
    )
    if ("events" in value and events is None) or ("services" in value and services is None):
        return None
    return NotifyTarget(url, name, DEFAULT_NOTICES if events is None else events, services)


def check_notifications(value: Any, at: At) -> tuple[NotifyTarget, ...] | None:
    """The list as healerd.yaml gives it (or already built, from check_settings)."""
    if isinstance(value, tuple) and all(isinstance(t, NotifyTarget) for t in value):
        return value
    if value is None:
        return ()
    if not isinstance(value, list):
        at.error(f"must be a list of targets ({{url: ..., events: [...]}}), not {describe(value)}")
        return None
    if len(value) > MAX_TARGETS:
        at.error(f"has {len(value)} targets; at most {MAX_TARGETS}")
        return None
    before = len(at.errors)
    targets = []
    for i, item in enumerate(value):
        where = (
            at.item(value, i) if isinstance(value, LineList) else at.child(i, at.line, index=True)
        )
        target = _target(item, i, where)
        if target is not None:
            targets.append(target)
    names = [t.name for t in targets]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        at.error(f"two targets are named {dup!r}; give each its own name")
    return tuple(targets) if len(at.errors) == before else None


NOTIFY_CHILDREN: tuple[Key, ...] = (
    Key(
        "url",
        "Apprise URL",
        "Where to send: any URL Apprise knows (ntfy://, gotify://, mailto://, slack://, "
        "matrix://, tgram://, mqtt://, json://, form://, ...). It holds credentials: "
        "healerd never shows it (status, events, logs and errors name the target by "
        "`name` or by the scheme and host alone), and healerd.yaml must then be readable "
        "by root and healerd's group only. A target may also be the URL alone.",
        "ntfy://ntfy.example.net/edge-7",
        default_doc="required",
    ),
    Key(
        "name",
        "short name",
        "How status, metrics (`target` label) and `healerctl notify test` name the target; "
        "default: its position and masked URL (`1:ntfy://ntfy.example.net/***`).",
        "ops-phone",
        default_doc="its position and masked URL",
    ),
    Key(
        "events",
        "list of " + " | ".join(NoticeKind),
        "What the target is sent; default: all but `heal`. crash-loop: a service waits "
        "out its crash-loop backoff (the exit code, OOM or signal, restarts so far, the "
        "next try, its last 10 lines of output); failed: Failed, Degraded, "
        "ImagePullBackOff, a halted rollout (the reason); recovered: such a service runs "
        "again (one message, how long it was down); update: an image update applied, "
        "found but held (window, delay, lock, pre_update) or only found (auto_update: "
        "notify); rollback: an update rolled back; config-error: a file refused "
        "(file:line: the first error), fixed or removed; engine: the engine went away or "
        "came back; pressure: "
        "host pressure began or ended, or holds a service back; healerd: healerd started "
        "after an unclean stop; heal: every plain heal.",
        "[crash-loop, failed, recovered]",
        default_doc="all but `heal`",
    ),
    Key(
        "services",
        "list of service names",
        "Only these services' notices (the engine's, a file's and healerd's own go to "
        "every target); default: every service. `x-healerd: {notify: false}` mutes a "
        "service for every target.",
        "[db, broker]",
        default_doc="every service",
    ),
)
_CHILDREN = tuple(k.name for k in NOTIFY_CHILDREN)

__all__ = [
    "NOTIFY_CHILDREN",
    "NotifyTarget",
    "check_notifications",
    "masked_url",
    "quiet_apprise",
    "scrub",
    "secrets_of",
]
