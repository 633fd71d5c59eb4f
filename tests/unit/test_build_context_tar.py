"""The Docker adapter's build context (issue 34): what is sent is what the context hash
covers: .dockerignore applied, an inline or outside Dockerfile added; the reason of a
failed build is bounded."""

from __future__ import annotations

import collections
import tarfile
from pathlib import Path

from healerd.config.buildctx import context_hash
from healerd.engine.docker.build import INLINE_NAME, MAX_REASON, _options, _reason, context_tar
from healerd.model import LABEL_CONTEXT_HASH, BuildSpec


def members(build: BuildSpec) -> tuple[dict[str, bytes], str]:
    tar, dockerfile = context_tar(build)
    with tar, tarfile.open(fileobj=tar) as t:
        found = {m.name: (t.extractfile(m).read() if m.isfile() else b"") for m in t}  # type: ignore[union-attr]
    return found, dockerfile


def test_ignored_files_are_not_sent_and_an_inline_dockerfile_is(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("*.log\n")
    (tmp_path / "app.txt").write_text("app")
    (tmp_path / "debug.log").write_text("noise")
    build = BuildSpec(str(tmp_path), dockerfile_inline="FROM busybox\n")
    found, dockerfile = members(build)
    assert dockerfile == INLINE_NAME and found[INLINE_NAME] == b"FROM busybox\n"
    assert "app.txt" in found and "debug.log" not in found


def test_a_dockerfile_outside_the_context_is_added(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (tmp_path / "Dockerfile.prod").write_text("FROM busybox\n")
    found, dockerfile = members(BuildSpec(str(ctx), dockerfile="../Dockerfile.prod"))
    assert found[dockerfile] == b"FROM busybox\n"


def test_the_image_carries_the_context_hash_and_the_reason_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM busybox\n")
    build = BuildSpec(str(tmp_path), labels=(("a", "b"),))
    build = BuildSpec(str(tmp_path), labels=(("a", "b"),), context_hash=context_hash(build))
    assert _options(build)["labels"] == {"a": "b", LABEL_CONTEXT_HASH: build.context_hash}
    lines = collections.deque(["x" * 500] * 12)
    reason = _reason("t", "boom", lines)
    assert reason.startswith("build t: boom\nxxx") and len(reason) == MAX_REASON
