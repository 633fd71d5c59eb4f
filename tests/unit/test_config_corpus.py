"""The invalid corpus: every file in tests/corpus/invalid gives exactly its expected messages.

Each file holds one class of error; tests/corpus/invalid/EXPECTED.yaml lists the messages
(`file:line:col: field: reason`, the file named relative to the corpus directory) that the
daemon's own loader must give for it, no more and no fewer.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import load_service_file
from tests.unit.harness.documents import CASES, CORPUS, INDEX
from tests.unit.harness.files import trusted_tmp_dir


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Strict modes check every directory up to /, and pytest's own tmp_path is in /tmp
    (world-writable): these tests get a directory that passes (test_security_config)."""
    with trusted_tmp_dir() as path:
        yield path


def test_the_index_and_the_directory_agree() -> None:
    files = {p.name for p in CORPUS.glob("*.yaml")} - {INDEX.name}
    assert files == set(CASES)
    assert len(CASES) >= 30


def test_every_case_has_one_kind_of_error() -> None:
    for name, case in CASES.items():
        assert case["errors"], name
        fields = {message.split(": ")[1] for message in case["errors"]}
        assert len(case["errors"]) == 1 or len(fields) == 1, name


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_file_gives_exactly_the_expected_messages(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    path = CORPUS / name
    mode = case.get("mode")
    if mode is not None:  # git keeps no group or other write bits: make them here
        path = tmp_path / name
        shutil.copyfile(CORPUS / name, path)
        os.chmod(path, int(mode, 8))
    result = load_service_file(path, name, strict_modes=mode is not None)
    assert result.services is None
    subst = {"{dir}": str(CORPUS), "{path}": str(path), "{uid}": str(os.geteuid())}
    expected = []
    for message in case["errors"]:
        for placeholder, value in subst.items():
            message = message.replace(placeholder, value)
        expected.append(message)
    assert [str(e) for e in result.errors] == expected
