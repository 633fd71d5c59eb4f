"""A followed tag's pin and what judges it: the pure half of healerd.core.updates
(which digest a service runs, whether its trial failed or is proven)."""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass

from healerd.core import jobs
from healerd.core.planner import history
from healerd.core.readiness import available, finished
from healerd.engine.reference import split_reference
from healerd.model import ContainerState, ObservedContainer, ServiceSpec
from healerd.vocabulary import AutoUpdate


@dataclass(frozen=True)
class Pin:
    declared: str  # the image as the file names it (repo:tag)
    digest: str  # sha256:...
    previous: str = ""  # the digest before it: a rollback's target, kept by image GC
    trying: bool = False  # rolled out, not proven yet
    since: float = 0.0  # when the trial began (wall clock): older containers say nothing


FOLLOWING = (AutoUpdate.REGISTRY, AutoUpdate.NOTIFY)


def follows(spec: ServiceSpec | None) -> bool:
    """Whether the service follows its tag (an image pinned by digest never moves)."""
    return spec is not None and spec.auto_update in FOLLOWING and "@" not in spec.image


def repository(image: str) -> str:
    return split_reference(image)[0]


def hub_short(repo: str) -> str:
    """Docker Hub's repositories as the engine writes them in RepoDigests (`nginx`,
    `user/app`), whatever the file wrote (`docker.io/library/nginx`)."""
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def pinned_ref(declared: str, digest: str) -> str:
    return f"{declared}@{digest}"


def digest_in(ref: str, declared: str) -> str | None:
    """The digest of a reference made by pinned_ref for `declared`, else None."""
    prefix = f"{declared}@"
    return ref[len(prefix) :] if ref.startswith(prefix) and "sha256:" in ref else None


def short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def failure(
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    unhealthy: Set[str],
    forgiven: Set[str],
    halted: str,
    since: float = 0.0,
) -> str:
    """Why the pinned spec's containers failed ("" while they may still succeed): one
    made since the trial began exited (not by an operator's stop or an engine restart; a
    run-once one with code 0 is a success), one is unhealthy past its grace, or the
    rollout passed its deadline. Failed containers kept as history of an earlier trial
    say nothing of this one."""
    old = {c.id for c in history(mine)}
    for c in mine:
        if c.spec_hash != spec.spec_hash or c.id in forgiven or c.id in old:
            continue
        if c.created < since - 1:  # the list's creation times are whole seconds
            continue
        if c.id in unhealthy:
            return f"container {c.name} turned unhealthy"
        if c.state in (ContainerState.EXITED, ContainerState.DEAD) and c.exit_code is not None:
            if jobs.run_once(spec) and c.exit_code == 0:
                continue
            return f"container {c.name} exited with code {c.exit_code}"
    return halted


def proven(spec: ServiceSpec, mine: Sequence[ObservedContainer], now: float) -> bool:
    """Every replica on the pinned spec and available (min_ready_seconds passed), no old
    one left running."""
    if any(c.running and c.spec_hash != spec.spec_hash for c in mine):
        return False
    ok = sum(1 for c in mine if available(c, spec, now) or (finished(c, spec) and c.exit_code == 0))
    return ok >= spec.replicas


def adopted(
    spec: ServiceSpec, mine: Sequence[ObservedContainer], skip: Set[str] = frozenset()
) -> str | None:
    """The digest a restarted healerd pins again: the oldest running container's (the
    proven one, if a rollout was under way), else the newest stopped one's (after a
    reboot); never a failed container kept as history (a rolled-back digest), nor one
    of a digest in `skip` (those that failed)."""
    old = {c.id for c in history(mine)}
    live = [
        c for c in mine if c.id not in old and digest_in(c.image, spec.image) not in (None, *skip)
    ]
    running = sorted((c for c in live if c.running), key=lambda c: c.created)
    stopped = sorted((c for c in live if not c.running), key=lambda c: -c.created)
    for c in (*running, *stopped):
        return digest_in(c.image, spec.image)
    return None


def on_trial(
    spec: ServiceSpec, mine: Sequence[ObservedContainer], digest: str, adopted: str | None
) -> bool:
    """Whether a trial of `digest` that a restarted healerd finds recorded goes on: the
    digest it adopted is that one, or a container of the service (running or stopped,
    not one kept as history) was made from it. Else nothing of it is left to judge."""
    if adopted == digest:
        return True
    old = {c.id for c in history(mine)}
    return any(c.id not in old and digest_in(c.image, spec.image) == digest for c in mine)


__all__ = [
    "FOLLOWING",
    "Pin",
    "adopted",
    "digest_in",
    "failure",
    "follows",
    "hub_short",
    "on_trial",
    "pinned_ref",
    "proven",
    "repository",
    "short",
]
