"""CHANGELOG.md becomes the Debian package's changelog (packaging/debian_changelog.py,
run by packaging/build-deb): it must convert, and its newest version must be the
package's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healerd import __version__

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "debian_changelog.py"
MAINTAINER = "healerd maintainers <healerd@example.org>"
DATE = "Wed, 02 Dec 2026 00:00:00 +0000"


def convert(path: Path, version: str = __version__) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path), version, MAINTAINER, DATE],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_changelog_converts_and_names_the_packages_version() -> None:
    done = convert(REPO / "CHANGELOG.md")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"healerd ({__version__}) "), first
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    assert "`" not in done.stdout
    assert f" -- {MAINTAINER}  " in done.stdout


@pytest.mark.skipif(shutil.which("dpkg-parsechangelog") is None, reason="needs dpkg-dev")
def test_dpkg_reads_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "changelog"
    path.write_text(convert(REPO / "CHANGELOG.md").stdout)
    parsed = subprocess.run(
        ["dpkg-parsechangelog", "-l", str(path), "--all", "-S", "Version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert parsed.stdout.split()[0] == __version__
    assert parsed.stderr == ""  # no warning about the format


def test_a_changelog_of_another_version_stops_the_build(tmp_path: Path) -> None:
    done = convert(REPO / "CHANGELOG.md", version="9.9.9")
    assert done.returncode == 1
    assert "the newest version is" in done.stderr and "9.9.9" in done.stderr


def test_released_versions_are_dated_and_only_the_newest_may_be_unreleased(
    tmp_path: Path,
) -> None:
    path = tmp_path / "CHANGELOG.md"
    path.write_text(
        "# Changelog\n\n- not an item: before any version\n\n"
        "## 0.2.0 - unreleased\n\n### Group\n\n- one `thing`,\n  on two lines\n\n"
        "## 0.1.0 - 2026-12-01\n\n### Older\n\n- another\n"
    )
    done = convert(path, "0.2.0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:4] == [
        "healerd (0.2.0) UNRELEASED; urgency=medium",
        "",
        "  * Group:",
        "    - one thing, on two lines",
    ]
    assert "healerd (0.1.0) unstable; urgency=medium" in done.stdout
    assert f" -- {MAINTAINER}  Tue, 01 Dec 2026 00:00:00 +0000" in done.stdout
    path.write_text("## 0.2.0 - 2026-12-02\n\n### G\n\n- a\n\n## 0.1.0 - unreleased\n")
    done = convert(path, "0.2.0")
    assert done.returncode == 1 and "only the newest version may be unreleased" in done.stderr
    path.write_text("## 0.2.0 (soon)\n")
    done = convert(path, "0.2.0")
    assert done.returncode == 1 and "not '## VERSION - YYYY-MM-DD'" in done.stderr
