"""Project files for the Compose reading tests: written dedented, and a result that
must have read without errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

from healerd.config.servicefile import FileResult
from healerd.model import ServiceSpec


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def good(result: FileResult) -> dict[str, ServiceSpec]:
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services
