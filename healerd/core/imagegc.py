"""Image garbage collection: which unused images healerd may remove, and removing them.

Like kubelet's: when the engine's data root is at least `high_threshold_percent` full,
unused images go, oldest first, until it is at most `low_threshold_percent` full; and
right after an update, `trim` removes the older images of the updated repository that
healerd pulled itself.

Under the thresholds, as with kubelet, an image may go when every repository it is
named in (its tags and digests) is the repository of a declared service's image, or of
an image healerd pulled: an unused image of a declared repository is fair game whoever
pulled it. An image also named in any other repository, or in none (one built or loaded
by hand), is someone else's; but one in none that healerd pulled or built itself (`mine`:
a build a rebuild of its tag replaced) may go too. `trim`, which needs no full disk, is
narrower: only images healerd pulled itself, by ID. Those IDs are the images the
references healerd pulled (or built) named when it looked (`mine`), kept in `state_dir`
across restarts (a store, see healerd.core.persist) and forgotten once the engine no
longer lists them.

Never removed, whatever the disk:

- an image any container uses, running or stopped, healerd's or not (the engine also
  refuses such a removal, which covers a container made meanwhile);
- an image a declared service names, by tag or digest;
- an image the `protected` references name (the auto-updater's current and previous
  pinned digests);
- under the thresholds, the previous image of each declared repository, for rollback:
  the protected one if there is one, else the one most recently seen to fall unused.

"Oldest" is the time healerd first saw the image unused (kubelet's last-used time, as
well as healerd can tell without a database); images seen unused at the same moment
(all of them, at start) go by the image's build time (`Created`). `min_age` counts from
when healerd first saw the image unused, for the threshold runs and `trim` alike, so a
restart of healerd delays removals by `min_age`, never hastens them.

The choice (`for_space`, `for_trim`) is pure, in healerd.core.imagechoice (its names are
re-exported here); `ImageCollector` does the I/O through the engine protocol.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from healerd.config.imagegc import ImageGcSettings, describe_image_gc
from healerd.core.clock import Clock
from healerd.core.events import EventLog
from healerd.core.imagechoice import (
    Inventory,
    Ref,
    bytes_to_free,
    for_space,
    for_trim,
    label,
    names,
    parse_ref,
    repositories,
    ripe,
    size_text,
    used_percent,
)
from healerd.core.persist import MemoryStore, StateStore
from healerd.engine import EngineError, ImageStore, LocalImage
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.imagegc")

# How long after healerd's start the first collection waits at most.
FIRST_RUN_DELAY = 60.0
# The IDs of images healerd pulled read from a store at most (those remembered are
# always a subset of the engine's images).
MAX_MINE = 10_000


# -- the collector ------------------------------------------------------------------------


def _nothing_removed(_size: int) -> None:
    pass


class ImageCollector:
    """Runs the collection every `interval`, and `trim` on request (the auto-updater's
    thread); one at a time. Remembers, in memory, when it first saw each image unused
    and which references healerd pulled (`note_pull`); in `store`, across restarts, the
    IDs of the images those references named (`mine`).

    `declared()` maps each declared service to its image, or is None while that is not
    known (a config file broken since start): then nothing is removed. `disk()` is the
    data root's (total, free) bytes, None when unknown. `pulled()` the references
    healerd pulled (the executor's and the updater's records; `note_pull` adds others).
    `protect` adds a source of references to keep."""

    def __init__(
        self,
        engine: ImageStore,
        clock: Clock,
        events: EventLog,
        settings: Callable[[], ImageGcSettings],
        declared: Callable[[], Mapping[str, str] | None],
        disk: Callable[[], tuple[int, int] | None],
        *,
        pulled: Callable[[], Iterable[str]] = frozenset,
        on_removed: Callable[[int], None] = _nothing_removed,
        store: StateStore | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._events = events
        self._settings = settings
        self._declared = declared
        self._disk = disk
        self._on_removed = on_removed
        self._pulled_by = pulled
        self._run_lock = threading.Lock()  # one collection or trim at a time
        self._lock = threading.Lock()  # the memory below
        self._protectors: list[Callable[[], Iterable[str]]] = []
        self._pulled: set[str] = set()
        self._unused_since: dict[str, float] = {}
        self._store = store or MemoryStore()
        self._mine = _loaded_ids(self._store.load())
        self.removed = 0  # images removed since start
        self.freed = 0  # their bytes, as the engine sized them

    # -- inputs -----------------------------------------------------------------------

    def protect(self, source: Callable[[], Iterable[str]]) -> None:
        """Keep every image the references `source()` returns name (asked at each run)."""
        with self._lock:
            self._protectors.append(source)

    def mine(self) -> frozenset[str]:
        """The IDs of the images healerd pulled, as the last look found them."""
        with self._lock:
            return frozenset(self._mine)

    def note_pull(self, reference: str) -> None:
        """healerd pulled `reference`: its repository's unused images may be collected."""
        with self._lock:
            self._pulled.add(reference)

    # -- runs ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Collect every `interval` until `stop` is set (a thread's body). The first run
        waits up to FIRST_RUN_DELAY: healerd's start (the heals after a reboot) goes first."""
        log.info("%s", describe_image_gc(self._settings()))
        if stop.wait(min(self._settings().interval, FIRST_RUN_DELAY)):
            return
        while not stop.is_set():
            try:
                self.collect()
            except EngineError as exc:
                log.info("image garbage collection skipped: %s", exc)
            except Exception:
                log.exception("image garbage collection failed unexpectedly")
            stop.wait(self._settings().interval)

    def collect(self) -> list[LocalImage]:
        """One run: note which images are unused, and when the disk is over the high
        threshold, remove the oldest unused images healerd may remove until it is at
        the low one. Returns the images removed."""
        settings = self._settings()
        if not settings.enabled:
            return []
        with self._run_lock:
            inv = self._look()
            if inv is None:
                return []
            disk = self._disk()
            if disk is None:
                return []
            total, free = disk
            high, low = settings.high_threshold_percent, settings.low_threshold_percent
            to_free = bytes_to_free(total, free, high, low)
            if to_free <= 0:
                return []
            used = used_percent(total, free)
            candidates = ripe(inv, self._clock.monotonic(), settings.min_age)
            log.log(
                logging.INFO if candidates else logging.DEBUG,
                "data root %.0f%% full (image_gc high threshold %d%%): freeing %s, %d image(s) "
                "may go",
                used,
                high,
                size_text(to_free),
                len(candidates),
            )
            why = f"data root {used:.0f}% full, at or above image_gc.high_threshold_percent {high}%"
            # Removed one by one until enough is freed: one the engine refuses (a container
            # made meanwhile) frees nothing, and the next oldest goes instead.
            return self._remove(candidates, why, to_free)

    def trim(self, repository: str, keep: Iterable[str]) -> list[LocalImage]:
        """After an update of `repository`: remove its unused images but those `keep`
        names (the current and previous references), whatever the disk. Never an image
        a container uses, a declared service or a protected reference names, or also
        named in a repository that is not healerd's. Returns the images removed; an
        engine error is logged, not raised (the next trim or run tries again)."""
        keep = tuple(keep)
        if not self._settings().enabled:
            return []
        with self._run_lock:
            try:
                inv = self._look()
                if inv is None:
                    return []
                now, min_age = self._clock.monotonic(), self._settings().min_age
                chosen = for_trim(inv, repository, keep, now, min_age)
                kept = ", ".join(keep) or "nothing"
                why = f"after the update of {parse_ref(repository).repository} (kept {kept})"
                return self._remove(chosen, why)
            except EngineError as exc:
                log.info("image trim of %s skipped: %s", repository, exc)
                return []

    def _look(self) -> Inventory | None:
        """The engine's images, those in use, and what healerd knows; None while the
        declared services are not known."""
        if self._declared() is None:
            log.info("image garbage collection waits: the declared services are not known")
            return None
        images = self._engine.list_images()
        in_use = self._engine.images_in_use()
        # The declaration is read again after the lists: an image pulled for a service
        # declared meanwhile is in the list only if its declaration is in this one.
        declared = self._declared()
        if declared is None:
            return None
        now = self._clock.monotonic()
        with self._lock:
            listed = {i.id for i in images}
            for gone in set(self._unused_since) - listed:
                del self._unused_since[gone]
            for image in images:
                if image.id in in_use:
                    self._unused_since.pop(image.id, None)
                else:
                    self._unused_since.setdefault(image.id, now)
            protectors, pulled = list(self._protectors), set(self._pulled)
            unused = dict(self._unused_since)
        protected = frozenset(r for source in protectors for r in source())
        pulled.update(self._pulled_by())
        return Inventory(
            images=images,
            in_use=frozenset(in_use),
            declared=frozenset(declared.values()),
            protected=protected,
            pulled=frozenset(pulled),
            unused_since=unused,
            mine=self._note_mine(images, pulled),
        )

    def _note_mine(self, images: Sequence[LocalImage], pulled: Iterable[str]) -> frozenset[str]:
        """The IDs of the images healerd pulled: those its pulled references name now,
        with those remembered that the engine still lists; saved when they changed."""
        refs = tuple(pulled)
        listed = {i.id for i in images}
        named = {i.id for i in images if any(names(i, r) for r in refs)}
        with self._lock:
            mine = (self._mine & listed) | named
            changed = mine != self._mine
            if changed:
                self._mine = mine
            kept = frozenset(self._mine)
        if changed:
            try:
                self._store.save({"pulled_image_ids": sorted(kept)})
            except OSError as exc:
                log.warning("the IDs of the images healerd pulled not saved: %s", exc)
        return kept

    def _remove(
        self, chosen: Sequence[LocalImage], why: str, enough: int | None = None
    ) -> list[LocalImage]:
        """Remove `chosen` in order (until `enough` bytes are freed, if given)."""
        declared = self._declared() or {}
        removed: list[LocalImage] = []
        freed = 0
        for image in chosen:
            if enough is not None and freed >= enough:
                break
            if not self._engine.remove_image(image.id):
                continue  # a container uses it after all (made meanwhile), or it is gone
            removed.append(image)
            freed += image.size
            with self._lock:
                self._unused_since.pop(image.id, None)
                self.removed += 1
                self.freed += image.size
            self._on_removed(image.size)
            service = _service_of(image, declared)
            message = f"removed image {label(image)} ({size_text(image.size)}): {why}"
            log.info("%s%s", f"{service}: " if service else "", message)
            self._events.record(EventKind.IMAGE_REMOVED, service, message)
        return removed


def _loaded_ids(data: object) -> set[str]:
    """The IDs a store kept (`{"pulled_image_ids": [...]}`); anything else is none."""
    ids = data.get("pulled_image_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        return set()
    return {i for i in ids[:MAX_MINE] if isinstance(i, str) and i.startswith("sha256:")}


def _service_of(image: LocalImage, declared: Mapping[str, str]) -> str:
    """The first declared service (by name) whose image is of the image's repository."""
    repos = repositories(image)
    for name in sorted(declared):
        if parse_ref(declared[name]).repository in repos:
            return name
    return ""


__all__ = [
    "ImageCollector",
    "Inventory",
    "Ref",
    "bytes_to_free",
    "for_space",
    "for_trim",
    "names",
    "parse_ref",
    "repositories",
    "ripe",
]
