"""The corpus of public Compose projects (issue 34, point 6): whole project directories
as their authors publish them (Compose files, override and `-f` files, `.env` examples,
files named by `extends`, `include` and `env_file`, build contexts), each loaded as a
conf.d project directory; every refusal must be a listed, deliberate one, and the
figure the docs state is the one measured here.

The projects' files are not kept in this repository: tests/corpus/projects/SOURCES.md
names each one (repository, commit, paths with their git blob hashes, licence, how
`docker compose` is invoked). The test reads them from $HEALERD_PROJECT_CORPUS, else
from tests/corpus/projects/<project>/, else from the shared/ folder beside the
checkout (shared/corpus/projects/), and is skipped when none holds them.
`HEALERD_UPDATE_CORPUS_FIGURE=1` rewrites the figure line in the docs. Where docker-compose
1.29.2 is installed, its verdict on each project is checked against SOURCES.md."""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import cast

import pytest

from healerd.config.errors import ConfigError
from healerd.config.servicefile import FileResult

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "tests" / "corpus" / "projects"
SOURCES = HERE / "SOURCES.md"
FIGURE_FILES = (REPO / "README.md", REPO / "docs" / "user-guide.md")
_FIGURE = re.compile(
    r"\d+\s+of\s+the\s+\d+\s+public\s+Compose\s+projects\s+in\s+the\s+project\s+corpus[^.]*\."
)
ACCEPTED_AT_LEAST = 15  # may only go up

# project -> (a part of every error's text, why it is refused on purpose). Every other
# project of SOURCES.md is expected to load.
_BALENA = (
    "Dockerfile: No such file",
    "balena's builder makes the Dockerfile from Dockerfile.template (or picks "
    "Dockerfile.<arch>); docker compose build finds none either",
)
REFUSED: dict[str, tuple[str, str]] = {
    "balena--cloud-relay": _BALENA,
    "balena--multicontainer-getting-started": _BALENA,
    "balena--sound": _BALENA,
    "copilot-for-consensus--include": (
        ".secrets: '",
        "its secret files are the user's to make from the published .example files "
        "(docker compose up refuses without them too)",
    ),
    "homelab-slochewie--hass": (
        "duplicate key",
        "zigbee2mqtt's environment: is written twice; docker compose v2 refuses a duplicate "
        "key too (docker-compose 1.29.2's YAML reader kept the last one)",
    ),
    "homelab-supby--ha-server": (
        "${",
        "its .env example keeps the placeholders to fill in (`<name of HA cluster>`, "
        "`<stick1 path>`): no container name or device path (the engine refuses them too)",
    ),
    "magistrala--bootstrap": (
        "services.certbot.pid",
        "pid: service:nginx (another service's namespace) is not supported "
        "(docs/reference/compose.md)",
    ),
    "magistrala--prometheus": (
        "services.certbot.pid",
        "pid: service:nginx (another service's namespace) is not supported "
        "(docs/reference/compose.md)",
    ),
}

Loader = Callable[..., FileResult]


def corpus_root() -> Path | None:
    """Where the projects' files are, or None (then the corpus tests are skipped)."""
    candidates = [
        Path(os.environ["HEALERD_PROJECT_CORPUS"])
        if os.environ.get("HEALERD_PROJECT_CORPUS")
        else None,
        HERE,
        REPO.parent / "shared" / "corpus" / "projects",
    ]
    for root in candidates:
        if root is not None and any(p.is_dir() for p in root.glob("*--*")):
            return root
    return None


def listed_projects() -> dict[str, dict[str, str]]:
    """SOURCES.md's projects: name -> {"env": "NAME=value ...", "docker-compose": ...}."""
    projects: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        if m := re.fullmatch(r"### `([^`]+)`", line):
            current = projects.setdefault(m.group(1), {})
        elif current is not None and (
            m := re.fullmatch(r"- ([a-z0-9.-]+)(?: \(\d+\))?: (.*)", line)
        ):
            current[m.group(1)] = m.group(2)
    return projects


def environment_of(entry: dict[str, str]) -> dict[str, str]:
    """The variables `docker compose` is run with (`- environment: `NAME=value``)."""
    text = entry.get("environment", "")
    return dict(pair.split("=", 1) for pair in re.findall(r"`([A-Z_]+=[^`]*)`", text))


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_list(entry: dict[str, str]) -> dict[str, str]:
    """SOURCES.md's `- files (N): `path` (blob prefix), ...` as path -> blob prefix."""
    return dict(re.findall(r"`([^`]+)` \(([0-9a-f]{12})\)", entry.get("files", "")))


def loader() -> Loader:
    try:
        module = importlib.import_module("healerd.config.projectdir")
    except ImportError as exc:  # pragma: no cover - until issue 34's loader lands
        pytest.fail(f"healerd.config.projectdir is not there yet (issue 34, point 1): {exc}")
    load = getattr(module, "load_project_dir", None)
    if load is None:  # pragma: no cover
        pytest.fail("healerd.config.projectdir.load_project_dir is not there yet")
    return cast(Loader, load)


def load(root: Path, name: str, env: dict[str, str], mp: pytest.MonkeyPatch) -> FileResult:
    """One project as a conf.d directory; the invocation's variables (COMPOSE_FILE ...)
    are given as healerd.yaml's interpolate_environment would pass them."""
    with mp.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        names: Collection[str] = tuple(env)
        return loader()(root / name, name, strict_modes=False, environment=names)


def deliberate(name: str, errors: tuple[ConfigError, ...]) -> str | None:
    if name not in REFUSED:
        return None
    part, why = REFUSED[name]
    return why if all(part in f"{e.field}: {e.reason}" for e in errors) else None


def figure(accepted: int, total: int, refused: int) -> str:
    return (
        f"{accepted} of the {total} public Compose projects in the project corpus load "
        f"unchanged as project directories ({refused} refused on purpose)."
    )


def rewritten(stated: str, line: str) -> str:
    """The stated figure with the measured numbers, its line breaks kept where the
    wording is the same (else the measured sentence on one line)."""
    numbers = iter(re.findall(r"\d+", line))
    new = re.sub(r"\d+", lambda _: next(numbers), stated)
    return new if " ".join(new.split()) == line else line


def figure_lines() -> Iterator[tuple[Path, str]]:
    for path in FIGURE_FILES:
        for m in _FIGURE.finditer(path.read_text(encoding="utf-8")):
            yield path, " ".join(m.group(0).split())


def test_every_project_has_its_source() -> None:
    projects = listed_projects()
    assert len(projects) >= 20, "tests/corpus/projects/SOURCES.md lists too few projects"
    for name, entry in projects.items():
        for key in ("repository", "commit", "licence", "invocation", "docker-compose-1.29.2"):
            assert entry.get(key), f"{name}: no `{key}` in SOURCES.md"
    assert set(REFUSED) <= set(projects)
    assert all(file_list(entry) for entry in projects.values())


def test_the_files_are_the_listed_ones() -> None:
    projects = listed_projects()
    root = corpus_root()
    if root is None:
        pytest.skip("the project corpus's files are not here (see SOURCES.md)")
    present = {p.name for p in root.iterdir() if p.is_dir() and "--" in p.name}
    assert present == set(projects), f"not in SOURCES.md: {present - set(projects)}; " + (
        f"missing: {set(projects) - present}"
    )
    for name, entry in projects.items():
        files = file_list(entry)
        assert files, f"{name}: no files listed"
        changed = set(re.findall(r"`([^`]+)`", entry.get("changed", "")))
        for rel, blob in files.items():
            path = root / name / rel
            assert path.is_file(), f"{name}: {rel} is missing"
            if rel not in changed:
                assert git_blob(path.read_bytes()).startswith(blob), f"{name}: {rel} differs"
            else:
                assert re.search(r"(?im)^\s*FROM\s", path.read_text(encoding="utf-8")), rel


def test_every_project_loads_or_is_refused_deliberately(monkeypatch: pytest.MonkeyPatch) -> None:
    root = corpus_root()
    if root is None:
        pytest.skip("the project corpus's files are not here (see SOURCES.md)")
    projects = listed_projects()
    accepted, refused, stray = 0, 0, []
    logging.disable(logging.WARNING)  # unset variables and the like: expected here
    try:
        for name, entry in sorted(projects.items()):
            result = load(root, name, environment_of(entry), monkeypatch)
            if result.services is not None and not result.errors:
                accepted += 1
                if name in REFUSED:
                    stray.append(f"{name}: loads now, take it off REFUSED")
                continue
            why = deliberate(name, result.errors)
            if why is None:
                stray.append(f"{name}:\n  " + "\n  ".join(str(e) for e in result.errors))
            else:
                refused += 1
    finally:
        logging.disable(logging.NOTSET)
    line = figure(accepted, len(projects), refused)
    print(f"\nproject corpus: {line}")
    assert not stray, "refused, and not on purpose:\n" + "\n".join(stray)
    assert accepted >= ACCEPTED_AT_LEAST
    if os.environ.get("HEALERD_UPDATE_CORPUS_FIGURE") == "1":
        for path in FIGURE_FILES:
            text = path.read_text(encoding="utf-8")
            path.write_text(_FIGURE.sub(lambda m: rewritten(m.group(0), line), text), "utf-8")
    stated = list(figure_lines())
    assert stated, f"no figure line in {[str(p) for p in FIGURE_FILES]}: add {line!r}"
    wrong = [f"{p.name}: {text!r}" for p, text in stated if text != line]
    assert not wrong, (
        f"the docs state another figure than {line!r} "
        f"(HEALERD_UPDATE_CORPUS_FIGURE=1 rewrites it): {wrong}"
    )


def test_docker_compose_verdicts_are_the_recorded_ones() -> None:
    """SOURCES.md's docker-compose 1.29.2 column, checked where that tool is installed
    (`docker-compose config -q` needs no engine)."""
    root, tool = corpus_root(), shutil.which("docker-compose")
    if root is None or tool is None:
        pytest.skip("needs the project corpus's files and docker-compose 1.29.2")
    wrong = []
    for name, entry in sorted(listed_projects().items()):
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root), **environment_of(entry)}
        run = subprocess.run(
            [tool, "config", "-q"], cwd=root / name, env=env, capture_output=True, timeout=60
        )
        recorded = entry["docker-compose-1.29.2"].startswith("accepts")
        if (run.returncode == 0) != recorded:
            wrong.append(f"{name}: exit {run.returncode}: {run.stderr.decode()[-300:]}")
    assert not wrong, "docker-compose's verdict is not the recorded one:\n" + "\n".join(wrong)
