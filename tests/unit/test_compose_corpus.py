"""The corpus of public Compose files (tests/corpus/compose/, sources in SOURCES.md): how
many validate unchanged, and that every refusal is a deliberate one (issue 16), named by
file, line and field. The acceptance figure may only go up (docs/user-guide.md: "Compose files")."""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

from healerd.config import ConfigError, parse_service_text

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "compose"
# 24 since build: is taken (issue 34): a file whose build context is not in the corpus
# (one had an image beside it, and its build was ignored before) is refused now.
ACCEPTED_AT_LEAST = 24
_SERVICE_FIELD = re.compile(r"services\.[^.\[]+\.([a-z_]+)")

# Parts of a project that other files complete (`docker compose -f base.yml -f this.yml`,
# IOTstack's service templates): Compose cannot run one alone either.
FRAGMENTS = {
    "edgex--builder-base.yaml": "EdgeX's compose-builder merges it with the database file",
    "edgex--builder-device-mqtt.yaml": "merged by EdgeX's compose-builder with the base",
    "edgex--builder-device-usb-camera.yaml": "merged by EdgeX's compose-builder with the base",
    "edgex--builder-mqtt-broker.yaml": "merged by EdgeX's compose-builder with the base",
    "edgex--builder-security.yaml": "overrides of the base services (no image of their own)",
    "iotstack--esphome.yaml": "an IOTstack service template, not a Compose file",
    "iotstack--home-assistant.yaml": "an IOTstack service template, not a Compose file",
    "iotstack--mosquitto.yaml": "an IOTstack service template, not a Compose file",
    "iotstack--telegraf.yaml": "an IOTstack service template, not a Compose file",
    "iotstack--zigbee2mqtt.yaml": "an IOTstack service template, not a Compose file",
}
# Fields healerd refuses on purpose, each documented in docs/reference/compose.md.
REFUSED_FIELDS = {
    "pid": "ipc/pid service:NAME (sharing another service's namespace) is not supported",
}


def why_refused(error: ConfigError, lines: list[str]) -> str | None:
    """The deliberate reason behind one error, or None (then healerd refuses something a
    Compose user may expect to run: a failure of this test)."""
    # The entry's own line, and the next few for a long-syntax entry (a mapping).
    line = "\n".join(lines[error.line - 1 : error.line + 3]) if error.line else ""
    field = m.group(1) if (m := _SERVICE_FIELD.match(error.field)) else ""
    if "build" in error.field and "is not a directory" in error.reason:
        return "builds from a context of its project that is not in the corpus"
    if "No such file or directory" in error.reason or "cannot read" in error.reason:
        return "names a file of its project that is not in the corpus (Compose refuses too)"
    if "${" in line or "is not set" in error.reason:
        return "needs its project's .env: a value is empty without it (Compose refuses too)"
    if error.file in FRAGMENTS:
        return f"a fragment: {FRAGMENTS[error.file]}"
    if field == "restart" and "'never'" in error.reason:
        return "restart: never is no restart policy (Docker refuses it too)"
    if field in REFUSED_FIELDS:
        return REFUSED_FIELDS[field]
    return None


def test_the_corpus_is_there_with_its_sources() -> None:
    files = sorted(CORPUS.glob("*.yaml"))
    assert len(files) >= 50
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    missing = [f.name for f in files if f"`{f.name}`" not in sources]
    assert not missing, f"no source noted for {missing}"


def test_every_file_validates_or_is_refused_deliberately() -> None:
    accepted, why, stray = 0, Counter[str](), []
    logging.disable(logging.WARNING)  # unset variables, ignored builds: expected here
    try:
        for path in sorted(CORPUS.glob("*.yaml")):
            text = path.read_text(encoding="utf-8")
            result = parse_service_text(text, path.name, base_dir=CORPUS, env={})
            if not result.errors:
                accepted += 1
                continue
            lines = text.splitlines()
            reasons = set()
            for e in result.errors:
                assert e.file == path.name and (e.field or e.line is None), e
                reason = why_refused(e, lines)
                if reason is None:
                    stray.append(str(e))
                else:
                    reasons.add(reason)
            why.update(reasons)
    finally:
        logging.disable(logging.NOTSET)
    total = len(list(CORPUS.glob("*.yaml")))
    print(f"\ncompose corpus: {accepted}/{total} validate unchanged; refused because:")
    for reason, count in why.most_common():
        print(f"  {count:3d} files: {reason}")
    assert not stray, "refused, and not on purpose:\n" + "\n".join(stray)
    assert accepted >= ACCEPTED_AT_LEAST
