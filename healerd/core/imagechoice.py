"""Image garbage collection's choice, pure: what an image is named, which images are
unused and whose repositories are declared or pulled by healerd (`Inventory`), how many
bytes to free, and which images go, oldest unused first (`for_space`), or after an
update (`for_trim`). The rules are in healerd.core.imagegc's docstring; its
`ImageCollector` does the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from healerd.engine.api import LocalImage

# Docker Hub's names, shortened as the engine lists them (its "familiar" form).
_HUB_PREFIXES = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


@dataclass(frozen=True)
class Ref:
    """A parsed image reference: repository (familiar form), tag and digest (or None)."""

    repository: str
    tag: str | None = None
    digest: str | None = None


def parse_ref(reference: str) -> Ref:
    """`[host[:port]/]path[:tag][@sha256:...]`, with Docker Hub names made familiar
    (`docker.io/library/busybox` is `busybox`), as the engine's image list writes them."""
    name, _, digest = reference.partition("@")
    tag: str | None = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return Ref(familiar(name), tag, digest or None)


def familiar(name: str) -> str:
    for prefix in _HUB_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    rest = name.removeprefix("library/")
    return rest if rest != name and "/" not in rest else name


def repositories(image: LocalImage) -> frozenset[str]:
    return frozenset(parse_ref(r).repository for r in (*image.tags, *image.digests))


def names(image: LocalImage, reference: str) -> bool:
    """Whether `reference` names `image`: by digest when it has one (the engine ignores
    the tag of `repo:tag@digest`), else by tag (`latest` when none), or by ID."""
    if reference.startswith("sha256:") and "/" not in reference:
        return image.id == reference
    ref = parse_ref(reference)
    if ref.digest is not None:
        return any(
            (d.repository, d.digest) == (ref.repository, ref.digest)
            for d in map(parse_ref, image.digests)
        )
    tag = ref.tag or "latest"
    return any((t.repository, t.tag) == (ref.repository, tag) for t in map(parse_ref, image.tags))


def label(image: LocalImage) -> str:
    """How an event names an image: a tag, else a digest, else its short ID."""
    if image.tags:
        return image.tags[0]
    if image.digests:
        return image.digests[0]
    return image.id.removeprefix("sha256:")[:12]


def size_text(size: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class Inventory:
    """One look at the engine's images and what healerd knows about them."""

    images: Sequence[LocalImage]
    in_use: AbstractSet[str]  # image IDs of every container, healerd's or not
    declared: AbstractSet[str]  # the references the declared services name
    protected: AbstractSet[str] = frozenset()  # kept as well (the auto-updater's)
    pulled: AbstractSet[str] = frozenset()  # references this daemon pulled
    unused_since: Mapping[str, float] = field(default_factory=dict)  # ID -> first seen unused
    mine: AbstractSet[str] = frozenset()  # IDs of the images healerd pulled itself

    @property
    def known(self) -> frozenset[str]:
        """The repositories healerd may collect images of."""
        return frozenset(parse_ref(r).repository for r in (*self.declared, *self.pulled))

    def named(self, refs: Iterable[str]) -> frozenset[str]:
        refs = tuple(refs)
        return frozenset(i.id for i in self.images if any(names(i, r) for r in refs))

    def collectable(self, extra_repositories: AbstractSet[str] = frozenset()) -> list[LocalImage]:
        """The images nothing keeps: every repository of theirs healerd's (or none left,
        for one healerd pulled or built itself: a build that a rebuild of its tag
        replaced), no container using them, named by no declared service nor protected
        reference."""
        known = self.known | extra_repositories
        kept = self.named((*self.declared, *self.protected))
        out = []
        for image in self.images:
            repos = repositories(image)
            ours = repos <= known if repos else image.id in self.mine
            if ours and image.id not in self.in_use and image.id not in kept:
                out.append(image)
        return out

    def age_key(self, image: LocalImage) -> tuple[float, float, str]:
        """Oldest first: first seen unused, then built, then ID (a stable order)."""
        return (self.unused_since.get(image.id, math.inf), image.created, image.id)

    def rollback(self) -> frozenset[str]:
        """The previous image of each declared repository: the protected ones (the
        auto-updater knows), else the one most recently seen to fall unused."""
        protected = self.named(self.protected)
        current = self.named(self.declared)
        keep: set[str] = set()
        for repo in sorted({parse_ref(r).repository for r in self.declared}):
            mine = [i for i in self.images if repo in repositories(i)]
            if any(i.id in protected and i.id not in current for i in mine):
                continue  # kept anyway, as protected
            older = [i for i in mine if i.id not in current and i.id not in self.in_use]
            if older:
                keep.add(max(older, key=self.age_key).id)
        return frozenset(keep)


def bytes_to_free(total: int, free: int, high: int, low: int) -> int:
    """Kubelet's rule: nothing below `high` percent used, else down to `low` percent."""
    if total <= 0:
        return 0
    used = total - free
    if used * 100 < high * total:
        return 0
    return max(0, used - total * low // 100)


def used_percent(total: int, free: int) -> float:
    return 100.0 * (total - free) / total if total > 0 else 0.0


def unused_for(inv: Inventory, image: LocalImage, now: float, min_age: float) -> bool:
    since = inv.unused_since.get(image.id)
    return since is not None and now - since >= min_age


def ripe(inv: Inventory, now: float, min_age: float) -> list[LocalImage]:
    """Every image a threshold run may remove, oldest first: collectable, not the
    previous image of a declared repository, and unused for `min_age`."""
    rollback = inv.rollback()
    found = [
        i for i in inv.collectable() if i.id not in rollback and unused_for(inv, i, now, min_age)
    ]
    return sorted(found, key=inv.age_key)


def for_space(inv: Inventory, to_free: int, now: float, min_age: float) -> list[LocalImage]:
    """What to remove, oldest first, to free `to_free` bytes (as the image sizes say:
    shared layers make that an overestimate, which the next run makes up for)."""
    chosen: list[LocalImage] = []
    freed = 0
    for image in ripe(inv, now, min_age):
        if freed >= to_free:
            break
        chosen.append(image)
        freed += image.size
    return chosen


def for_trim(
    inv: Inventory, repository: str, keep: Iterable[str], now: float, min_age: float
) -> list[LocalImage]:
    """The unused images of `repository` that healerd pulled itself (`inv.mine`) but
    those `keep` names, oldest first, after an update: no threshold, but unused for
    `min_age`. Someone else's image of the repository is never trimmed."""
    repo = parse_ref(repository).repository
    kept = inv.named(keep)
    found = [
        i
        for i in inv.collectable(frozenset({repo}))
        if repo in repositories(i)
        and i.id in inv.mine
        and i.id not in kept
        and unused_for(inv, i, now, min_age)
    ]
    return sorted(found, key=inv.age_key)
