"""The corpus of public Compose files (tests/corpus/compose/, sources in SOURCES.md): how
many validate unchanged, and why the others are refused, by field (issue 16). Every
refusal names file, line and field; the acceptance figure may only go up."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from healerd.config import parse_service_text

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "compose"
# Raise it as Compose features land (README: "Compose's container settings").
ACCEPTED_AT_LEAST = 9
_SERVICE_FIELD = re.compile(r"services\.[^.\[]+\.([a-z_]+)")


def test_the_corpus_is_there_with_its_sources() -> None:
    files = sorted(CORPUS.glob("*.yaml"))
    assert len(files) >= 50
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    missing = [f.name for f in files if f"`{f.name}`" not in sources]
    assert not missing, f"no source noted for {missing}"


def test_every_file_validates_or_is_refused_by_file_line_and_field() -> None:
    accepted, why = 0, Counter[str]()
    for path in sorted(CORPUS.glob("*.yaml")):
        result = parse_service_text(path.read_text(encoding="utf-8"), path.name)
        if not result.errors:
            accepted += 1
            continue
        fields = set()
        for e in result.errors:
            assert e.file == path.name and (e.field or e.line is None), e
            m = _SERVICE_FIELD.match(e.field or "")
            fields.add(m.group(1) if m else f"top-level {(e.field or 'file').split('.')[0]}")
        why.update(fields)
    total = len(list(CORPUS.glob("*.yaml")))
    print(f"\ncompose corpus: {accepted}/{total} validate unchanged; refused for:")
    for field, count in why.most_common():
        print(f"  {count:3d} files: {field}")
    assert accepted >= ACCEPTED_AT_LEAST
