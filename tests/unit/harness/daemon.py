"""A Daemon on a FakeEngine, with settings as the command line gives them."""

from __future__ import annotations

from pathlib import Path

from healerd.core.clock import FakeClock
from healerd.daemon.main import Daemon, build_parser, resolve_settings
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


def settings_for(tmp_path: Path, *argv: str, file: str = ""):  # type: ignore[no-untyped-def]
    (tmp_path / "conf.d").mkdir(exist_ok=True)
    if file:
        (tmp_path / "healerd.yaml").write_text(file)
    # Never the host's /var/lib/healerd: a hand-off marker there is a real healerd's.
    state = ["--state-dir", str(tmp_path / "state")]
    return resolve_settings(
        build_parser().parse_args(["--config-dir", str(tmp_path), *state, *argv])
    )


def daemon(tmp_path: Path) -> tuple[Daemon, FakeEngine]:
    engine = FakeEngine(allow=LOOP_CALLS | {"identity"})
    return Daemon(settings_for(tmp_path), engine, FakeClock()), engine
