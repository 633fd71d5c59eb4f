"""When a service that builds (`build:`) needs a build, by its pull_policy: the rule,
pure, apart from the policy object that acts on it (healerd.core.images).

- `build` (the default with `build:`): build when the image is missing, or when it was
  built from another context (its LABEL_CONTEXT_HASH differs); never pull.
- `missing`: build only when the image is missing.
- `never`: neither build nor pull; a missing image is the service's reason.
- `always`: pull once per spec, as docker compose does, and build when that pull fails
  and the image is missing or not of this context.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from healerd.model import LABEL_CONTEXT_HASH, PullPolicy


class Need(Enum):
    NOTHING = "nothing"  # the image there serves
    BUILD = "build"
    PULL = "pull"  # always: the once-per-spec pull first
    MISSING = "missing"  # never: not present, and nothing may be done


def build_need(
    policy: PullPolicy,
    labels: Mapping[str, str] | None,
    context_hash: str,
    *,
    pulled: bool,
) -> Need:
    """`labels`: the image's (None: not present); `pulled`: `always` has pulled (or tried
    to) for this spec already."""
    if policy is PullPolicy.NEVER:
        return Need.NOTHING if labels is not None else Need.MISSING
    if policy is PullPolicy.ALWAYS and not pulled:
        return Need.PULL
    if labels is None:
        return Need.BUILD
    if policy is PullPolicy.MISSING:
        return Need.NOTHING
    if policy is PullPolicy.ALWAYS and labels.get(LABEL_CONTEXT_HASH) is None:
        return Need.NOTHING  # the registry's image, pulled for this spec
    current = labels.get(LABEL_CONTEXT_HASH) == context_hash
    return Need.NOTHING if current else Need.BUILD


__all__ = ["Need", "build_need"]
