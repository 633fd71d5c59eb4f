"""Checks around every test.

A FakeEngine (tests/unit/harness/fake_engine.py) raises at a call its test did not allow, but
the loop catches exceptions in a pass (and a daemon's threads swallow them): so a test in
which any FakeEngine refused a call fails here, in the phase (setup, call, teardown)
where the call was made, whoever caught the error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

# healerd refuses config files under a directory that others can write (issue 15), and
# /tmp is one: the tests keep their temporary files under a root-only directory instead.
# Read by pytest when it makes its first tmp_path (and by tempfile).
_TEMP_ROOT = Path("/run/ht")  # short: a socket path is at most 107 bytes
if os.geteuid() == 0 and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
    _TEMP_ROOT.mkdir(mode=0o700, parents=True, exist_ok=True)

    os.chmod(_TEMP_ROOT, 0o700)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_TEMP_ROOT)


def _refusals() -> list[str]:
    fake = sys.modules.get("tests.unit.harness.fake_engine")
    refused: list[str] = fake.new_refusals() if fake is not None else []
    return refused


def _checked() -> Generator[None, object, object]:
    try:
        result = yield
    except BaseException as exc:
        refused = _refusals()
        if refused:
            exc.add_note(f"FakeEngine also refused: {', '.join(refused)}")
        raise
    refused = _refusals()
    if refused:
        pytest.fail(
            f"FakeEngine refused {len(refused)} call(s) this test did not allow: "
            f"{', '.join(refused[:5])}{' ...' if len(refused) > 5 else ''} "
            "(allow them with FakeEngine(..., allow=...) if the test means them)",
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    fake = sys.modules.get("tests.unit.harness.fake_engine")
    if fake is not None:
        fake.forget_engines()
    return (yield from _checked())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _checked())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    return (yield from _checked())
