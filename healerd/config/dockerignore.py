"""`.dockerignore` as Docker reads it (moby's ignorefile and patternmatcher), so that
the context hash covers the files a build is sent and no other.

- A line is a pattern after its spaces are trimmed; `#` lines and empty ones are skipped;
  `!` makes an exception; the pattern is cleaned as Go's `filepath.Clean` does and a
  leading `/` dropped.
- Go's `filepath.Match` syntax (`*` and `?` within one path part, `[...]` classes, `\\`
  escapes) plus `**`, any number of directories.
- A path is excluded when the last pattern that matches it, or one of its parent
  directories, is not an exception.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_ESCAPED = set(".+()|{}$^")


def read_patterns(text: str) -> list[str]:
    """The patterns of a `.dockerignore`'s text, as moby's ignorefile.ReadAll gives them."""
    patterns = []
    for line in text.splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        invert = pattern.startswith("!")
        if invert:
            pattern = pattern[1:].strip()
        if pattern:
            pattern = posixpath.normpath(pattern)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern.lstrip("/") or "/"
        patterns.append("!" + pattern if invert else pattern)
    return patterns


def _regex(pattern: str) -> re.Pattern[str]:
    """moby's Pattern.compile: the pattern as an anchored regular expression."""
    out, i, n = "^", 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "*" and i < n and pattern[i] == "*":
            i += 1
            if i < n and pattern[i] == "/":
                i += 1  # `**/` is `**`
            out += ".*" if i == n else "(.*/)?"
        elif ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\":
            out += "\\" + pattern[i] if i < n else "\\\\"
            i += 1 if i < n else 0
        elif ch in _ESCAPED:
            out += "\\" + ch
        else:
            out += ch  # `[`, `]` and plain characters
    return re.compile(out + "$", re.DOTALL)


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str] | None  # None: the pattern does not compile; it matches nothing
    exclusion: bool


class Matcher:
    """Which paths (relative to the context, `/`-separated) a build leaves out."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = []
        for raw in patterns:
            exclusion = raw.startswith("!")
            body = raw[1:] if exclusion else raw
            try:
                regex: re.Pattern[str] | None = _regex(body)
            except re.error:
                regex = None
            self.patterns.append(_Pattern(regex, exclusion))
        self.has_exceptions = any(p.exclusion for p in self.patterns)

    def excluded(self, path: str) -> bool:
        """moby's MatchesOrParentMatches: the last pattern that matches the path or a
        parent of it decides."""
        parts = path.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        matched = False
        for pattern in self.patterns:
            if pattern.exclusion != matched or pattern.regex is None:
                continue
            if any(pattern.regex.match(c) for c in candidates):
                matched = not pattern.exclusion
        return matched


__all__ = ["Matcher", "read_patterns"]
