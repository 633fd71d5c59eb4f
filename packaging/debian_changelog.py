"""CHANGELOG.md in Debian's changelog format, for the package's changelog.gz.

    python3 packaging/debian_changelog.py CHANGELOG.md VERSION "MAINTAINER <EMAIL>" DATE

Standard library only (packaging/build-deb runs it with the system's python3). Reads
`## VERSION - YYYY-MM-DD` (or `- unreleased`, the newest only) sections, their `### `
groups and `- ` items, and writes one Debian entry per version: each group a `  * `
line, each item a `    - ` line, wrapped at 79 columns, Markdown's backticks and
asterisks dropped. A released version is dated at 00:00 UTC of its day and goes to
`unstable`; the unreleased one is dated DATE (RFC 2822, from SOURCE_DATE_EPOCH) and goes
to `UNRELEASED`. Fails (exit 1, saying why) when the newest version is not VERSION, so
that a package never ships a changelog of another version.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HEADING = re.compile(
    r"^## (?P<version>[0-9][0-9A-Za-z.+~-]*) - (?P<date>\d{4}-\d{2}-\d{2}|unreleased)$"
)
WIDTH = 79


@dataclass
class Group:
    title: str
    items: list[str] = field(default_factory=list)


@dataclass
class Release:
    version: str
    date: str  # YYYY-MM-DD or "unreleased"
    groups: list[Group] = field(default_factory=list)


class ChangelogError(ValueError):
    pass


def parse(text: str) -> list[Release]:
    """The versions of CHANGELOG.md, newest first, as written."""
    releases: list[Release] = []
    item: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            m = HEADING.match(line)
            if m is None:
                raise ChangelogError(f"line {number}: not '## VERSION - YYYY-MM-DD': {line!r}")
            releases.append(Release(m["version"], m["date"]))
            item = None
        elif line.startswith("### "):
            if not releases:
                raise ChangelogError(f"line {number}: a group before any version")
            releases[-1].groups.append(Group(line[4:].strip()))
            item = None
        elif line.startswith("- ") and releases:
            if not releases[-1].groups:
                raise ChangelogError(f"line {number}: an item before any '### ' group")
            item = [line[2:].strip()]
            releases[-1].groups[-1].items.append("")
            _set_last(releases, item)
        elif line.startswith("  ") and item is not None:
            item.append(line.strip())
            _set_last(releases, item)
        elif not line.strip():
            item = None
    for release in releases[1:]:
        if release.date == "unreleased":
            raise ChangelogError(f"{release.version}: only the newest version may be unreleased")
    return releases


def _set_last(releases: list[Release], item: list[str]) -> None:
    releases[-1].groups[-1].items[-1] = " ".join(item)


def _plain(text: str) -> str:
    """Markdown's code and emphasis marks dropped: the changelog is plain text."""
    return text.replace("`", "").replace("**", "")


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        _plain(text),
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def debian(releases: list[Release], maintainer: str, unreleased_date: str) -> str:
    """Debian's changelog format (deb-changelog(5)), newest entry first."""
    out: list[str] = []
    for release in releases:
        unreleased = release.date == "unreleased"
        distribution = "UNRELEASED" if unreleased else "unstable"
        out.append(f"healerd ({release.version}) {distribution}; urgency=medium")
        out.append("")
        for group in release.groups:
            out += _wrapped(group.title + ":", "  * ", "    ")
            for item in group.items:
                out += _wrapped(item, "    - ", "      ")
        if not release.groups:
            out.append("  * No changes recorded.")
        out.append("")
        when = unreleased_date if unreleased else _rfc2822(release.date)
        out.append(f" -- {maintainer}  {when}")
        out.append("")
    return "\n".join(out)


def _rfc2822(day: str) -> str:
    return (
        datetime.strptime(day, "%Y-%m-%d")
        .replace(tzinfo=UTC)
        .strftime("%a, %d %b %Y %H:%M:%S +0000")
    )


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    path, version, maintainer, date = argv
    try:
        releases = parse(Path(path).read_text(encoding="utf-8"))
        if not releases:
            raise ChangelogError("no '## VERSION - DATE' section")
        if releases[0].version != version:
            raise ChangelogError(
                f"the newest version is {releases[0].version}, the package's is {version}: "
                "add a section for it"
            )
    except (OSError, ChangelogError) as exc:
        print(f"debian_changelog: {path}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(debian(releases, maintainer, date))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
