"""Distinct images of the test busybox image, for pushes that must move a tag: each has
its own /version file (so its own digest); a crashing one's command exits 1 at once."""

from __future__ import annotations

import json

import docker

from tests.support.busybox_image import COMMAND
from tests.support.registry import Registry

REPOSITORY = "healerd-test/variant"


def variant(api: docker.APIClient, base: str, version: str, *, crash: bool = False) -> str:
    """Commit `base` plus /version = `version` as healerd-test/variant:VERSION, whose
    command is the test command (or `sh -c "exit 1"` with `crash`); returns the ref."""
    cmd = ["sh", "-c", "exit 1"] if crash else COMMAND
    c = api.create_container(base, ["sh", "-c", f"echo {version} > /version"])
    try:
        api.start(c)
        api.wait(c, timeout=30)
        api.commit(c, repository=REPOSITORY, tag=version, changes=[f"CMD {json.dumps(cmd)}"])
    finally:
        api.remove_container(c, force=True)
    return f"{REPOSITORY}:{version}"


def push_digest(api: docker.APIClient, registry: Registry, image: str, repo: str, tag: str) -> str:
    """Push `image` as REPO:TAG to `registry`, drop the local image, and return the
    digest the registry now gives the tag."""
    registry.push(api, image, repo, tag)
    api.remove_image(image)
    return registry.digest(repo, tag)
