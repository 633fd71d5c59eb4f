"""Sending one message to one Apprise URL (healerd.daemon.notifications decides what
and when): the answer is the target's last words, its URL's secret parts masked.

Sends to several targets run side by side (a thread each), so what Apprise logs during
a send is taken from that send's context alone: one target's answer never carries the
log lines, and so the URL, of another.
"""

from __future__ import annotations

import contextvars
import logging

from healerd.config.notifyconf import masked_url, quiet_apprise, scrub


class AppriseSender:
    """One Apprise object per send: targets share nothing, and a reload's new URL is
    used at once. Apprise logs what it tries (with parts of the URL): its log goes to
    the answer, masked, never to healerd's (nor to stderr: a handler that drops it)."""

    def __init__(self) -> None:
        quiet_apprise()

    def send(self, url: str, title: str, body: str, failure: bool) -> tuple[bool, str]:
        import apprise  # loads 100+ plugins (0.1 s): only once a target is declared

        # async_mode off: Apprise sends in this thread (not in a pool of its own), so
        # what it logs of this send is found by its context (_SendLog).
        box = apprise.Apprise(asset=apprise.AppriseAsset(async_mode=False))
        if not box.add(url):
            return False, f"Apprise cannot send to {masked_url(url)}"
        kind = apprise.NotifyType.FAILURE if failure else apprise.NotifyType.INFO
        with _SendLog() as captured:
            try:
                ok = bool(box.notify(body=body, title=title, notify_type=kind))
            except Exception as exc:  # a plugin's bug must not end the sending thread
                ok, said = False, f"{type(exc).__name__}: {exc}"
            else:
                said = ""
        return ok, scrub(said or _last_words(captured.lines, ok), url)


# The send under way in this context: Apprise's own workers run a send in a copy of
# the sender's context (or, with async_mode off, in the sender's thread itself).
_SENDING: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "healerd_apprise_send", default=None
)


class _SendLog(logging.Handler):
    """What Apprise logs of this send while it is open: sends to other targets run
    beside it, and one target's answer must not carry another's URL."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._me = object()
        self._token: contextvars.Token[object | None] | None = None
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if _SENDING.get() is self._me:
            self.lines.append(record.getMessage())

    def __enter__(self) -> _SendLog:
        self._token = _SENDING.set(self._me)
        logging.getLogger("apprise").addHandler(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        logging.getLogger("apprise").removeHandler(self)
        if self._token is not None:
            _SENDING.reset(self._token)


def _last_words(lines: list[str], ok: bool) -> str:
    lines = [ln.strip() for ln in lines if ln.strip()]
    if ok:
        return "sent"
    worth = [ln for ln in lines if "fail" in ln.lower() or "error" in ln.lower()]
    return (worth or lines or ["refused, without a reason"])[-1][:300]


__all__ = ["AppriseSender"]
