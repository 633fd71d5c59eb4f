"""What a credential helper's failure is reported as (no docker import here).

A helper speaks the docker-credential-helpers protocol: credentials as JSON on stdout,
and on failure an error text, also on stdout. That text may hold what should not be
shown (a token in a backend's error, an account's ARN), and the docker SDK puts it into
its exception, which became the pull's reason in `/v1/status`, events and the journal,
for every reader (issue 29). So the reason names the helper, the registry and the exit
code only; the output is logged at debug level, cut and escaped. Output that is no
credentials (`{}`, not JSON) is an ImagePullFailed like any other, not an error the
loop did not expect.
"""

from __future__ import annotations

import logging
import subprocess

_log = logging.getLogger("healerd.engine")

# The most of a helper's output the debug log shows.
OUTPUT_SHOWN = 200
# Besides the SDK's own errors: what its credential store raises on output that is not
# credentials (`{}`: KeyError, not JSON: ValueError, `null`: TypeError).
BAD: tuple[type[Exception], ...] = (KeyError, ValueError, TypeError)


def detail(program: str, exc: BaseException) -> str:
    """How the helper `program` failed with `exc` (whatever the SDK raised: its own
    error, or a KeyError/ValueError/TypeError from bad output), in words that show
    nothing it said: "failed (exit N)", ..."""
    ran = _process_error(exc)
    if ran is not None:
        _log.debug("%s exited %d; its output: %s", program, ran.returncode, shown(ran.output))
        return f"failed (exit {ran.returncode})"
    if isinstance(exc, KeyError | ValueError | TypeError):
        _log.debug("%s gave output that is not credentials: %s", program, type(exc).__name__)
        return "failed: its output is not the credentials JSON of the helper protocol"
    if "not installed" in str(exc):  # the SDK's words for a helper it did not find
        return "failed: not installed (not found on PATH)"
    _log.debug("%s failed: %s", program, shown(str(exc)))
    return "failed"


def shown(output: object) -> str:
    """At most OUTPUT_SHOWN characters of a helper's output, with every control and
    non-ASCII character escaped (one line, nothing a terminal acts on)."""
    if isinstance(output, bytes):
        text = output.decode("utf-8", "replace")
    else:
        text = "" if output is None else str(output)
    cut = text[:OUTPUT_SHOWN]
    escaped = cut.encode("unicode_escape", "backslashreplace").decode("ascii")
    more = f" [{len(text) - len(cut)} more characters not shown]" if len(text) > len(cut) else ""
    return f'"{escaped}"{more}'


def _process_error(exc: BaseException) -> subprocess.CalledProcessError | None:
    """The helper's exit, wherever the SDK's exceptions keep it (their causes)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, subprocess.CalledProcessError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


__all__ = ["BAD", "OUTPUT_SHOWN", "detail", "shown"]
