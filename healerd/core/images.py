"""Whether a service's image is there to create from, and pulling (or building, for a
service with `build:`: healerd.core.builds) it when it is not.

The pull itself is an action of the executor (acting on the engine happens in one
place); this object keeps the policy's memory: images seen present a moment ago (a
heal need not ask again) and which spec `always` already pulled for. It says what is
wrong with an image (`ImageProblem`); `decide` picks the state, and the work queue's
per-service failure count the backoff, as for any failed pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from healerd.core.builds import Need, build_need
from healerd.core.clock import Clock
from healerd.core.events import EventLog
from healerd.core.executor import Executor
from healerd.core.outcome import ImageProblem, ImageTrouble, Tally
from healerd.core.timings import Timings
from healerd.core.updatepins import FOLLOWING
from healerd.engine import ImageBuildFailed, ImagePullFailed, ImageStore
from healerd.model import BuildSpec, PullPolicy, RegistryAuth, ServiceSpec
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.controller")
RECENT_BUILD = 600.0  # seconds a build's time is kept for healerctl build


def no_pull_check(image: str) -> str | None:
    """No host limits configured: every pull may go."""
    return None


class ImagePolicy:
    def __init__(
        self,
        engine: ImageStore,
        executor: Executor,
        clock: Clock,
        events: EventLog,
        timings: Timings,
        pull_refusal: Callable[[str], str | None],
        auth_for: Callable[[str], RegistryAuth | None],
        on_pull: Callable[[str, str, Tally | None], None],
    ) -> None:
        """`auth_for`: the credentials of an image's registry (auth.json), None for an
        anonymous pull; looked up at each pull, so new credentials apply at once.
        `on_pull(key, reason, tally)`: a pull begins (it may take minutes on a slow link),
        for the status to say so meanwhile. `pull_refusal(image)`: why the host has no
        room for the image now (None: it has; healerd.core.admission), `no_pull_check`
        without host limits."""
        self._engine = engine
        self._on_pull = on_pull
        self._auth_for = auth_for
        self._executor = executor
        self._clock = clock
        self._events = events
        self._t = timings
        self._pull_refusal = pull_refusal
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        # One build of a tag at a time (a pass and `healerctl build`, two services of one
        # image), and when each (tag, context hash) was last built.
        self._tag_locks: dict[str, threading.Lock] = {}
        self._built_at: dict[tuple[str, str], float] = {}
        self._pulled: dict[str, str] = {}  # service -> the spec hash `always` pulled for
        # Services whose image cannot be had now: they claim no room.
        self.waiting: set[str] = set()
        # `archived(reference)`: the ID of an image an archive in images_dir proved the
        # pinned digest of (healerd.daemon.imagework sets it); `_aliases`: the references
        # a create names by that ID, as the engine does not know the digest.
        self.archived: Callable[[str], str | None] = lambda reference: None
        self._aliases: dict[str, str] = {}

    def ensure(
        self, key: str, spec: ServiceSpec, tally: Tally | None = None
    ) -> ImageProblem | None:
        """Make sure the image is there before anything is created or stopped for it;
        else what is wrong (`decide` makes it a state, the work queue's failure count
        for the service its backoff). `tally`: the service's counts, for the status
        shown while a pull runs."""
        problem = self._ensure(key, spec, tally)
        with self._lock:
            if problem is None:
                self.waiting.discard(key)
            else:
                self.waiting.add(key)
        return problem

    def waiting_keys(self) -> list[str]:
        with self._lock:
            return sorted(self.waiting)

    def forget(self, key: str) -> None:
        """The service is gone: nothing of it is remembered."""
        with self._lock:
            self._pulled.pop(key, None)
            self.waiting.discard(key)

    def _fresh(self, key: str, spec: ServiceSpec) -> bool:
        seen = self._seen.get(spec.image)
        fresh = seen is not None and self._clock.monotonic() - seen < self._t.image_seen_ttl
        return fresh and (spec.pull_policy is not PullPolicy.ALWAYS or self._pulled_for(key, spec))

    def _pulled_for(self, key: str, spec: ServiceSpec) -> bool:
        with self._lock:
            return self._pulled.get(key) == spec.spec_hash

    def _ensure(self, key: str, spec: ServiceSpec, tally: Tally | None) -> ImageProblem | None:
        image, policy = spec.image, spec.pull_policy
        if spec.build is not None:
            with self._tag_lock(image):
                return self._ensure_built(key, spec, spec.build, tally)
        if self._fresh(key, spec):
            return None
        # (not for a pin of a followed tag: the updater reads its digest from the image
        # reference the engine lists for its containers, which by ID it would not)
        present = self._engine.image_present(image) or (
            spec.auto_update not in FOLLOWING and self._from_archive(image)
        )
        if present:
            self._saw(image)
        if present and not (policy is PullPolicy.ALWAYS and not self._pulled_for(key, spec)):
            return None
        if not present and policy is PullPolicy.NEVER:
            reason = f"image {image} is not present and pull_policy is never"
            return ImageProblem(ImageTrouble.NEVER_PULLED, reason)
        refusal = self._pull_refusal(image)
        if refusal is not None:
            return ImageProblem(ImageTrouble.NO_DISK, refusal)
        return self._pull(key, spec, present, tally)

    def _from_archive(self, image: str) -> bool:
        """A digest the engine does not know, proven by an archive loaded from images_dir
        whose image the engine has: created from that image's ID (`local_name`)."""
        found = self.archived(image) if "@" in image else None
        if found is not None and not self._engine.image_present(found):
            found = None
        with self._lock:
            if found is None:
                self._aliases.pop(image, None)
            else:
                self._aliases[image] = found
        return found is not None

    def local_name(self, image: str) -> str:
        """What a create names for `image`: itself, or the ID `_from_archive` found."""
        with self._lock:
            return self._aliases.get(image, image)

    def _pull(
        self, key: str, spec: ServiceSpec, present: bool, tally: Tally | None
    ) -> ImageProblem | None:
        image = spec.image
        log.info(
            "%s: pulling %s",
            key,
            image,
            extra={"healerd_service": key, "action": "pull", "reason": image},
        )
        self._on_pull(key, f"pulling {image}", tally)
        try:
            self._executor.pull(image, self._auth_for(image))
        except ImagePullFailed as exc:
            # The registry's own words (unauthorized, manifest unknown); never a secret.
            why = str(exc).removeprefix(f"pull {image}: ")
            self._events.record(EventKind.PULL_FAILED, key, f"cannot pull {image}: {why}")
            if not present:
                return ImageProblem(ImageTrouble.PULL_FAILED, f"cannot pull {image}: {why}")
            # pull_policy always, registry away, image on disk: a heal must not wait for
            # the registry. Use the local image; the next spec change pulls again.
            log.warning("%s: cannot pull %s (%s); using the local image", key, image, exc)
        else:
            self._events.record(EventKind.PULLED, key, f"pulled {image}")
        with self._lock:
            # `always` pulls once per spec: only the service's current spec is remembered.
            self._pulled[key] = spec.spec_hash
        return None

    def _ensure_built(
        self, key: str, spec: ServiceSpec, build: BuildSpec, tally: Tally | None
    ) -> ImageProblem | None:
        """A service that builds: its image as its pull_policy wants it (healerd.core.builds)."""
        seen_as = f"{spec.image} {build.context_hash}"
        if self._fresh_image(seen_as) and (
            spec.pull_policy is not PullPolicy.ALWAYS or self._pulled_for(key, spec)
        ):
            return None
        labels = self._engine.image_labels(spec.image)
        need = build_need(
            spec.pull_policy, labels, build.context_hash, pulled=self._pulled_for(key, spec)
        )
        if need is Need.PULL:
            if self._pull(key, spec, False, tally) is None:
                self._saw(seen_as)
                return None
            with self._lock:  # tried once for this spec: now the build decides
                self._pulled[key] = spec.spec_hash
            labels = self._engine.image_labels(spec.image)
            need = build_need(spec.pull_policy, labels, build.context_hash, pulled=True)
        if need is Need.MISSING:
            reason = f"image {spec.image} is not present and pull_policy is never"
            return ImageProblem(ImageTrouble.NEVER_PULLED, reason)
        problem = self._build(key, spec, build, tally) if need is Need.BUILD else None
        if problem is None:
            self._saw(seen_as)
        return problem

    def build_mark(self) -> float:
        """A moment for `build_now`'s `since`: taken before the reload that precedes it."""
        return self._clock.monotonic()

    def build_now(
        self, key: str, spec: ServiceSpec, *, no_cache: bool = False, since: float | None = None
    ) -> str:
        """`healerctl build`: build the service's image now if its context changed (or
        always, with `no_cache`); what was done, in words. Raises ImageBuildFailed. A
        build a pass made of this context after `since` (a `build_mark`) counts as this
        one's: the reload before it lets passes start it first."""
        build = spec.build
        if build is None:
            return f"{key} has no build section"
        with self._tag_lock(spec.image):
            labels = self._engine.image_labels(spec.image)
            need = build_need(PullPolicy.BUILD, labels, build.context_hash, pulled=True)
            if need is Need.NOTHING and not no_cache:
                at = self._built_at.get((spec.image, build.context_hash))
                if at is not None and since is not None and at >= since:
                    return f"built {spec.image}"
                return f"{spec.image} is up to date with its context"
            problem = self._build(key, spec, build, None, no_cache=no_cache)
        if problem is not None:
            raise ImageBuildFailed(problem.reason)
        self._saw(f"{spec.image} {build.context_hash}")
        return f"built {spec.image}"

    def _tag_lock(self, image: str) -> threading.Lock:
        with self._lock:
            return self._tag_locks.setdefault(image, threading.Lock())

    def _build(
        self,
        key: str,
        spec: ServiceSpec,
        build: BuildSpec,
        tally: Tally | None,
        *,
        no_cache: bool = False,
    ) -> ImageProblem | None:
        image = spec.image
        log.info(
            "%s: building %s from %s",
            key,
            image,
            build.context,
            extra={"healerd_service": key, "action": "build", "reason": image},
        )
        self._on_pull(key, f"building {image}", tally)
        try:
            self._executor.build(build, image, no_cache=no_cache)
        except ImageBuildFailed as exc:
            # The builder's own words, bounded by the adapter; the old image, and the
            # containers made from it, stay.
            why = str(exc).removeprefix(f"build {image}: ")
            self._events.record(EventKind.BUILD_FAILED, key, f"cannot build {image}: {why}")
            return ImageProblem(ImageTrouble.BUILD_FAILED, f"cannot build {image}: {why}")
        self._events.record(EventKind.BUILT, key, f"built {image}")
        now = self._clock.monotonic()
        with self._lock:
            recent = {k: t for k, t in self._built_at.items() if now - t < RECENT_BUILD}
            self._built_at = recent | {(image, build.context_hash): now}
        return None

    def _fresh_image(self, seen_as: str) -> bool:
        seen = self._seen.get(seen_as)
        return seen is not None and self._clock.monotonic() - seen < self._t.image_seen_ttl

    def _saw(self, image: str) -> None:
        now = self._clock.monotonic()
        with self._lock:
            ttl = self._t.image_seen_ttl
            self._seen = {i: t for i, t in self._seen.items() if now - t < ttl}
            self._seen[image] = now


__all__ = ["ImagePolicy"]
