"""The size gate (tests/check_size.py): modules at most 450 lines, except those on its
allow-list while they are split, and an allow-list entry goes once its module fits."""

from __future__ import annotations

from pathlib import Path

from tests.check_size import MAX_MODULE_LINES, problems


def module(root: Path, name: str, lines: int) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n" * lines)


def test_a_module_over_the_limit_fails_and_one_at_it_passes(tmp_path: Path) -> None:
    module(tmp_path, "healerd/core/at.py", MAX_MODULE_LINES)
    module(tmp_path, "healerd/core/over.py", MAX_MODULE_LINES + 1)
    found = problems(tmp_path / "healerd", {})
    assert found == [f"{tmp_path}/healerd/core/over.py: 451 lines (limit 450)"]


def test_an_allow_listed_module_is_held_at_its_own_limit(tmp_path: Path) -> None:
    module(tmp_path, "healerd/core/big.py", 590)
    assert problems(tmp_path / "healerd", {"healerd/core/big.py": 600}) == []
    module(tmp_path, "healerd/core/big.py", 601)
    assert problems(tmp_path / "healerd", {"healerd/core/big.py": 600}) == [
        f"{tmp_path}/healerd/core/big.py: 601 lines (limit 600)"
    ]


def test_an_allow_list_entry_whose_module_fits_or_is_gone_is_a_problem(tmp_path: Path) -> None:
    module(tmp_path, "healerd/core/split.py", 200)
    allowed = {"healerd/core/split.py": 600, "healerd/core/gone.py": 600}
    found = problems(tmp_path / "healerd", allowed)
    assert len(found) == 2
    assert "split.py: 200 lines, within 450: remove it from OVER_LIMIT_UNTIL_SPLIT" in found[0]
    assert found[1].startswith("healerd/core/gone.py is gone: remove it")
