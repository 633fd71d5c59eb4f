"""The chaos soak's in-place checks (tests/chaos/inplace.py): pure parts, no engine."""

from __future__ import annotations

import json
from pathlib import Path

from healerd.core.runs import Run, to_json
from healerd.daemon.runbook import FILE
from healerd.model import LABEL_CRASH_STREAK
from tests.chaos.inplace import Seen, not_in_place, read_runs, started_again, started_ts, streak
from tests.chaos.observe import Heal

BEFORE = "2026-12-02T01:26:23.123456789Z"
AFTER = "2026-12-02T01:26:24.5Z"


def heal(kind: str = "docker-kill", victim: str = "a" * 64, service: str = "api") -> Heal:
    return Heal(kind, service, victim, 0.0, 1, name="api-1", started_at=BEFORE)


def test_started_again_compares_times_not_strings() -> None:
    assert started_again(BEFORE, AFTER)
    assert not started_again(BEFORE, BEFORE)
    # The engine trims trailing zeros: "...23.12Z" is later than "...23.1Z" although it
    # sorts lower as a string.
    early, late = "2026-12-02T01:26:23.1Z", "2026-12-02T01:26:23.12Z"
    assert late < early and started_again(early, late)
    assert not started_again(BEFORE, None)
    assert started_ts("0001-01-01T00:00:00Z") == 0.0


def test_streak_from_the_run_book_else_the_label(tmp_path: Path) -> None:
    """The soak reads the file healerd writes (its own format, healerd.core.runs)."""
    (tmp_path / FILE).write_text(json.dumps(to_json({"x" * 64: Run(streak=3, restarts=4)})))
    runs = read_runs(tmp_path / FILE)
    assert streak({"Id": "x" * 64, "Labels": {LABEL_CRASH_STREAK: "1"}}, runs) == 3
    assert streak({"Id": "y" * 64, "Labels": {LABEL_CRASH_STREAK: "1"}}, runs) == 1
    assert streak({"Id": "y" * 64, "Labels": {}}, runs) == 0
    assert read_runs(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{")
    assert read_runs(tmp_path / "bad.json") == {}


def test_a_victim_started_again_with_no_create_is_healed_in_place() -> None:
    h = heal()
    assert not_in_place([h], {h.victim: Seen(True, AFTER, "running")}, {}, {}) == []


def test_what_is_not_an_in_place_heal_is_said() -> None:
    gone, stopped, same, replaced = (heal(victim=c * 64) for c in "bcde")
    seen = {
        stopped.victim: Seen(False, BEFORE, "exited"),
        same.victim: Seen(True, BEFORE, "running"),
        replaced.victim: Seen(False, BEFORE, "exited"),
    }
    problems = not_in_place(
        [gone, stopped, same, replaced],
        seen,
        {replaced.victim: "f" * 64},
        {"api": ["f" * 64]},
    )
    assert problems == [
        f"docker-kill victim api-1 ({'b' * 12}) of api is gone: not restarted in place",
        # The service's unexplained creates are said once, with the first victim.
        f"api: 1 container(s) created ({'f' * 12}) where only in-place heals were due",
        f"docker-kill victim api-1 ({'c' * 12}) of api is not running (exited)",
        f"docker-kill victim api-1 ({'d' * 12}) of api runs but was not started again "
        f"(StartedAt {BEFORE} -> {BEFORE})",
        f"docker-kill victim api-1 ({'e' * 12}) of api is not running (exited)",
        f"docker-kill victim api-1 ({'e' * 12}) of api was replaced by a new container {'f' * 12}",
    ]
