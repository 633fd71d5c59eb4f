"""healerd-services(5) and healerd.yaml(5) are generated from the key tables and kept
current, as docs/reference/config.md is (tests/unit/test_schema.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from healerd.config.fields import SERVICE_FIELDS
from healerd.config.manpages import MAN_PAGES, SERVICES_PAGE, SETTINGS_PAGE, man_text, roff
from healerd.config.settings import SETTINGS_FIELDS

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate with: python -m healerd.config.schema"


@pytest.mark.parametrize("page", MAN_PAGES, ids=lambda p: p.name)
def test_shipped_man_page_is_current(page: Path) -> None:
    assert (REPO / page).read_text(encoding="utf-8") == man_text(page), REGENERATE


def test_every_key_has_an_entry() -> None:
    services = man_text(SERVICES_PAGE)
    for key in SERVICE_FIELDS:
        assert f".B {key.name}\n" in services, key.name
        for child in key.children:
            assert f".B {key.name}.{child.name}\n" in services, child.name
    settings = man_text(SETTINGS_PAGE)
    for setting in SETTINGS_FIELDS:
        assert f".B {setting.name}\n" in settings, setting.name
        for child in setting.children:
            assert f".B {setting.name}.{child.name}\n" in settings, child.name


def test_markdown_becomes_roff_that_roff_cannot_misread() -> None:
    assert roff("a `--flag` and **bold**") == "a \\fB\\-\\-flag\\fR and \\fBbold\\fR"
    assert roff(".hidden request") == "\\&.hidden request"
    assert roff("'quoted start") == "\\&'quoted start"
    assert roff("C:\\path [guide](../user-guide.md)") == "C:\\epath guide"


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff")
@pytest.mark.parametrize("page", MAN_PAGES, ids=lambda p: p.name)
def test_groff_renders_it_without_a_warning(page: Path) -> None:
    done = subprocess.run(
        ["groff", "-man", "-ww", "-z", str(REPO / page)],
        capture_output=True,
        text=True,
        check=False,
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
