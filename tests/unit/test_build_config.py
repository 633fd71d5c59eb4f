"""`build:` (issue 34): what is taken and refused, the tag, .dockerignore as Docker reads
it, and the context hash that decides a rebuild."""

from __future__ import annotations

import os
from pathlib import Path

import docker.utils.build as sdk_build
import pytest

from healerd.config import parse_service_text
from healerd.config.buildctx import context_hash
from healerd.config.dockerignore import Matcher, read_patterns
from healerd.model import BuildSpec, PullPolicy, ServiceSpec
from tests.unit.harness.files import trusted_tmp_dir


def project(tmp_path: Path, text: str) -> tuple[dict[str, ServiceSpec], list[str]]:
    found = parse_service_text(text, str(tmp_path / "proj.yaml"))
    return found.services or {}, [f"{e.field}: {e.reason}" for e in found.errors]


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM busybox\nCOPY . /app\n")
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("data\n")
    return tmp_path


def test_the_long_syntax_is_taken_with_paths_from_the_project_directory(ctx: Path) -> None:
    (ctx / "docker").mkdir()
    (ctx / "docker" / "Dockerfile.prod").write_text("FROM busybox\n")
    specs, errors = project(
        ctx,
        """services:
  App:
    build:
      context: sub
      dockerfile: ../docker/Dockerfile.prod
      args: [VERSION=1.2]
      target: prod
      labels: {org.example.team: edge}
      cache_from: [proj-app:cache]
      network: host
      shm_size: 64m
      extra_hosts: ["db:10.0.0.2"]
""",
    )
    assert errors == []
    app = specs["App"]
    assert app.image == "proj-app"  # docker compose v2's <project>-<service>, lower case
    assert app.pull_policy is PullPolicy.BUILD
    b = app.build
    assert b is not None and b.context == str(ctx / "sub")
    assert (b.dockerfile, b.args, b.target) == (
        "../docker/Dockerfile.prod",
        (("VERSION", "1.2"),),
        "prod",
    )
    assert (b.labels, b.cache_from, b.network) == (
        (("org.example.team", "edge"),),
        ("proj-app:cache",),
        "host",
    )
    assert (b.shm_size, b.extra_hosts) == (64 << 20, ("db:10.0.0.2",))
    assert len(b.context_hash) == 64


def test_an_image_beside_build_is_the_tag_and_pull_policy_is_kept(ctx: Path) -> None:
    specs, errors = project(
        ctx, "services:\n  a:\n    image: me/a:2\n    pull_policy: missing\n    build: .\n"
    )
    assert errors == []
    assert (specs["a"].image, specs["a"].pull_policy) == ("me/a:2", PullPolicy.MISSING)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ("{context: ., ssh: [default]}", "build.ssh", "BuildKit"),
        ("{context: ., secrets: [npm]}", "build.secrets", "BuildKit"),
        ("{context: ., platforms: [linux/arm64]}", "build.platforms", "BuildKit"),
        ("{context: ., bogus: 1}", "build.bogus", "not a build key"),
        ("https://github.com/x/y.git", "build", "remote context"),
        ("{context: missing}", "build", "is not a directory"),
        ("{context: ., dockerfile: Nope}", "build", "cannot read"),
        (
            "{context: ., dockerfile: D, dockerfile_inline: 'FROM x'}",
            "build.dockerfile_inline",
            "cannot be combined",
        ),
        ("[.]", "build", "must be a context directory or a mapping"),
    ],
)
def test_what_a_build_cannot_do_is_refused_with_the_reason(
    ctx: Path, body: str, field: str, words: str
) -> None:
    _, errors = project(ctx, f"services:\n  a:\n    build: {body}\n")
    assert any(e.startswith(f"services.a.{field}:") and words in e for e in errors), errors


def test_pull_policy_build_needs_a_build(ctx: Path) -> None:
    _, errors = project(ctx, "services:\n  a:\n    image: x\n    pull_policy: build\n")
    assert errors == ["services.a.pull_policy: build needs a build section to build from"]


def build_of(ctx: Path, **kw: object) -> BuildSpec:
    return BuildSpec(str(ctx), **kw)  # type: ignore[arg-type]


def test_the_hash_follows_content_mode_new_files_the_dockerfile_and_settings(ctx: Path) -> None:
    first = context_hash(build_of(ctx))
    assert context_hash(build_of(ctx)) == first
    (ctx / "app.py").write_text("print(2)\n")
    second = context_hash(build_of(ctx))
    assert second != first
    os.chmod(ctx / "app.py", 0o755)
    third = context_hash(build_of(ctx))
    assert third != second
    (ctx / "new").mkdir()
    assert context_hash(build_of(ctx)) != third
    fourth = context_hash(build_of(ctx))
    assert context_hash(build_of(ctx, args=(("A", "1"),))) != fourth
    assert context_hash(build_of(ctx, dockerfile_inline="FROM busybox\n")) != fourth


def test_files_dockerignore_leaves_out_do_not_change_the_hash(ctx: Path) -> None:
    (ctx / ".dockerignore").write_text("# comment\n*.log\nsub\n!sub/keep.txt\n")
    before = context_hash(build_of(ctx))
    (ctx / "debug.log").write_text("noise")
    (ctx / "sub" / "data.txt").write_text("changed")
    assert context_hash(build_of(ctx)) == before
    (ctx / "sub" / "keep.txt").write_text("kept")  # the exception brings it back
    assert context_hash(build_of(ctx)) != before


# Patterns against paths, each checked against the docker SDK's port of moby's matcher.
PATTERNS = [
    ["*.log"],
    ["**/*.log"],
    ["node_modules"],
    ["/build"],
    ["docs/**", "!docs/keep.md"],
    ["*", "!src", "!Dockerfile"],
    ["a/*/c"],
    ["a/**/c"],
    ["?.txt"],
    ["[ab].txt"],
    ["**"],
    [".git", "**/__pycache__", "*.py[cod]"],
    ["sub/", "!sub/x/y.txt"],
]
PATHS = [
    "x.log", "deep/er/x.log", "node_modules/pkg/index.js", "build/out", "src/build",
    "docs/a.md", "docs/keep.md", "src/main.go", "Dockerfile", "a/b/c", "a/b/b/c", "a/c",
    "b.txt", "c.txt", "ab.txt", ".git/HEAD", "pkg/__pycache__/m.pyc", "m.pyc", "sub/x/y.txt",
    "sub/z",
]  # fmt: skip


@pytest.mark.parametrize("patterns", PATTERNS, ids=lambda p: " ".join(p))
def test_dockerignore_matches_as_docker_does(patterns: list[str]) -> None:
    ours = Matcher(read_patterns("\n".join(patterns)))
    theirs = sdk_build.PatternMatcher(read_patterns("\n".join(patterns)))
    for path in PATHS:
        assert ours.excluded(path) == bool(theirs.matches(path)), path


def test_dockerignore_lines_are_cleaned_as_moby_reads_them() -> None:
    assert read_patterns("  a/./b/  \n#x\n\n! c\n//d\n") == ["a/b", "!c", "d"]


def test_a_built_service_follows_no_registry_tag(ctx: Path) -> None:
    from healerd.config.updatekeys import UpdateDefaults, with_defaults
    from healerd.vocabulary import AutoUpdate

    _, errors = project(
        ctx, "services:\n  a:\n    build: .\n    x-healerd: {auto_update: registry}\n"
    )
    assert any(e.startswith("services.a.x-healerd: auto_update registry follows") for e in errors)
    specs, _ = project(ctx, "services:\n  a:\n    build: .\n")
    defaults = UpdateDefaults(auto_update=AutoUpdate.REGISTRY)
    assert with_defaults(specs["a"], defaults).auto_update is AutoUpdate.NEVER


def test_an_arg_without_a_value_is_left_to_the_dockerfile(ctx: Path) -> None:
    specs, errors = project(
        ctx,
        "services:\n  a:\n    build: {context: ., args: [A=1, B]}\n"
        "  b:\n    build: {context: ., args: {A: 1, B: }}\n",
    )
    assert errors == []
    for name in ("a", "b"):
        build = specs[name].build
        assert build is not None and build.args == (("A", "1"),)


def test_strict_modes_refuse_a_context_others_may_write() -> None:
    with trusted_tmp_dir() as root:
        (root / "Dockerfile").write_text("FROM busybox\n")
        text = "services:\n  a:\n    build: .\n"
        ok = parse_service_text(text, str(root / "p.yaml"), strict_modes=True)
        assert ok.errors == ()
        os.chmod(root, 0o777)
        found = parse_service_text(text, str(root / "p.yaml"), strict_modes=True)
        assert [e.field for e in found.errors] == ["services.a.build"]
        assert "build context" in found.errors[0].reason
