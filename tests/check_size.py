"""Size limits for healerd/: no module over 600 lines, no function over 60 lines.

Run by .ci/run (`python3 tests/check_size.py`); complexity (max 12) is ruff's C901 rule,
set in pyproject.toml. A module or function past a limit is a place to split, not to
raise the limit.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def problems(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            out.append(f"{path}: {n} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(
                        f"{path}:{node.lineno}: {node.name}() is {length} lines "
                        f"(limit {MAX_FUNCTION_LINES})"
                    )
    return out


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "healerd")
    found = problems(root)
    for line in found:
        print(line)
    print(f"check_size: {len(found)} problem(s) in {root}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
