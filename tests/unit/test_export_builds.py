"""Built services in an export (issue 34 point 5): Compose keeps the build section; Swarm
and Kubernetes need an image a node can pull, so a service that names none is refused
with what to write; a project directory exports like a conf.d file."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from healerd.cli import healerctl


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def project(tmp_path: Path, image: str = "") -> Path:
    directory = tmp_path / "site"
    (directory / "app").mkdir(parents=True)
    (directory / "app" / "Dockerfile").write_text("FROM busybox\n")
    (directory / "compose.yaml").write_text(
        "services:\n  app:\n"
        + (f"    image: {image}\n" if image else "")
        + "    build: {context: ./app, args: {MODE: edge}, target: run}\n"
        + "  cache:\n    image: busybox\n    depends_on: [app]\n"
    )
    return directory


def test_a_built_service_without_an_image_is_refused_for_swarm_and_kubernetes(
    tmp_path: Path,
) -> None:
    directory = project(tmp_path)
    for target in ("kubernetes", "swarm"):
        code, out, err = run("--to", target, str(directory))
        assert code == 1 and out == "", err
        assert "app: built here and tagged 'site-app', which no registry serves" in err


def test_a_built_service_that_names_its_image_exports_with_it(tmp_path: Path) -> None:
    directory = project(tmp_path, "registry.example.net/app:1")
    code, out, err = run("--to", "kubernetes", str(directory))
    assert code == 0, err
    images = [
        c["image"]
        for doc in yaml.safe_load_all(out)
        if doc and doc["kind"] == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert sorted(images) == ["busybox", "registry.example.net/app:1"]


def test_compose_keeps_the_build_section(tmp_path: Path) -> None:
    directory = project(tmp_path)
    code, out, err = run("--to", "compose", str(directory))
    assert code == 0, err
    app = yaml.safe_load(out)["services"]["app"]
    assert app["build"] == {
        "context": str(directory / "app"),
        "args": {"MODE": "edge"},
        "target": "run",
    }
    assert app["image"] == "site-app" and app["pull_policy"] == "build"
