"""A service's `build:` (Compose's build section) as the engine's classic build API takes
it, with the hash of what the build reads: a changed context rolls the service out."""

from __future__ import annotations

from dataclasses import dataclass

# The image label a healerd build carries: the context hash it was built from, so that a
# look at the image says whether it is the build of the context as it is now.
LABEL_CONTEXT_HASH = "io.healerd.build.context-hash"


@dataclass(frozen=True)
class BuildSpec:
    """Paths are absolute (relative ones start at the project directory)."""

    context: str
    dockerfile: str = "Dockerfile"  # relative to the context (or absolute)
    dockerfile_inline: str | None = None
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    cache_from: tuple[str, ...] = ()
    network: str | None = None
    shm_size: int | None = None
    extra_hosts: tuple[str, ...] = ()  # host:ip
    # sha256 of the files .dockerignore lets through, the Dockerfile and the settings
    # above (healerd.config.buildctx), taken at each reload: the spec hash holds it.
    context_hash: str = ""


__all__ = ["LABEL_CONTEXT_HASH", "BuildSpec"]
