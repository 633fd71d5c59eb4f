"""The daemon's image work beside the loop: garbage collection (healerd.core.imagegc),
the auto-update checker (healerd.daemon.updater), the images directory
(healerd.daemon.imagesdir) and the restores a restart cut short
(healerd.daemon.restorestart), each in a thread of its own, and wired together: the
updater's pinned and previous digests are kept, and so are the images loaded from the
directory that a declared service names; a proven update trims its repository's older
images; an archive loaded retries the services waiting for an image. What each
remembers across restarts is a file in `state_dir` (healerd.daemon.statefile)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from healerd.config import Settings
from healerd.core.clock import Clock
from healerd.core.controller import Controller
from healerd.core.imagefiles import declared_loaded
from healerd.core.imagegc import ImageCollector
from healerd.core.readlanes import PRIVILEGED, Reader
from healerd.core.updates import UpdateRefused, follows
from healerd.daemon.bundlefile import BundleError
from healerd.daemon.bundleinstall import EngineForBundle, install_bundle
from healerd.daemon.flags import docker_host
from healerd.daemon.imagesdir import STATE_FILE, ImagesDir
from healerd.daemon.imageview import Known, images_payload
from healerd.daemon.metrics import ImageGcMetrics
from healerd.daemon.restorestart import Interrupted, wait_ours
from healerd.daemon.snapshots import SnapshotStore
from healerd.daemon.statefile import StateFile
from healerd.daemon.updater import UpdateChecker
from healerd.daemon.updatesnapshots import DaemonSnapshots
from healerd.engine import Engine, EngineError, EngineUnavailable
from healerd.host import HostProbe
from healerd.model import ServiceSpec

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
UPDATES_FILE = "auto-update.json"  # bad digests and digests run, per service
IMAGES_FILE = "image-gc.json"  # the IDs of the images healerd pulled
BUNDLES_DIR = "bundles"  # bundles dropped into the images directory, installed here


def bundles_dir(state_dir: Path) -> Path:
    return state_dir / BUNDLES_DIR


class ImageWork:
    def __init__(
        self,
        controller: Controller,
        engine: Engine,
        clock: Clock,
        probe: HostProbe,
        metrics: ImageGcMetrics,
        settings: Callable[[], Settings],
    ) -> None:
        """`settings()`: the settings as they are now (image_gc and the interval reload)."""
        self._controller = controller
        self._probe = probe
        state, strict = settings().state_dir, settings().strict_modes
        updates = controller.updates
        updates.use_store(StateFile(state / UPDATES_FILE, "auto-update memory", strict=strict))
        snaps = SnapshotStore.at(state)
        updates.data.snapshots = DaemonSnapshots(snaps, engine, docker_host(settings()))
        # Restores a restart cut short: held now, before the loop may start them.
        self.engine_ours = threading.Event()  # set by the daemon once the engine is its own
        self.interrupted = Interrupted(
            snaps,
            updates.data,
            controller.events,
            self.engine_ours,
            spec_of=lambda service: controller.desired.services.get(service),
        )
        self.gc = ImageCollector(
            engine,
            clock,
            controller.events,
            settings=lambda: settings().image_gc,
            declared=self._declared_images,
            disk=self._data_root_disk,
            pulled=lambda: controller.pulled_images() | updates.pulled(),
            on_removed=metrics.on_removed,
            store=StateFile(state / IMAGES_FILE, "image GC memory", strict=strict),
        )
        self.gc.protect(controller.updates.protected)
        self.dir = ImagesDir(
            settings().images_dir,
            engine,
            clock,
            controller.events,
            StateFile(state / STATE_FILE, "images_dir memory", strict=strict),
            on_loaded=controller.retry_pulls,
            strict=strict,
            bundle=self._install_bundle,
        )
        self._engine, self._settings = engine, settings
        self.reload: Callable[[], None] = lambda: None  # the daemon's request_reload
        self.gc.protect(self._loaded_declared)
        controller.images.archived = lambda ref: self.dir.book().proven_id(ref)
        self._images_dir = str(settings().images_dir)
        controller.updates.after_update = self._trim_later
        self.updates = UpdateChecker(controller, clock, lambda: settings().auto_update_interval)

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        works = [
            ("image-gc", self.gc.run),
            ("updates", self.updates.run),
            ("images-dir", self.dir.run),
        ]
        return [
            *(
                threading.Thread(
                    target=self._once_ours, args=(run, stop), name=f"healerd-{name}", daemon=True
                )
                for name, run in works
            ),
            *self.interrupted.threads(stop),
        ]

    def _once_ours(self, run: Callable[[threading.Event], None], stop: threading.Event) -> None:
        """Image work removes, pulls and loads: only once the engine is this healerd's."""
        if wait_ours(self.engine_ours, stop):
            run(stop)

    def stop(self) -> None:
        """Wake the threads' waits once `stop` (of `threads`) is set."""
        self.updates.kick()

    def update_now(
        self, service: str, *, downgrade: bool, retry_failed: bool, look: bool = False
    ) -> bool:
        """`healerctl update SERVICE`: the operator's allowance for the service's next
        check, and a check now. False when the service does not follow its tag."""
        spec = self._controller.desired.services.get(service)
        updates = self._controller.updates
        if spec is None or not (follows(spec) or updates.pin(service) is not None):
            return False
        updates.allow(service, downgrade=downgrade, retry_failed=retry_failed, look=look)
        self.updates.kick()
        return True

    def rollback(self, service: str) -> str:
        """`healerctl rollback SERVICE` (UpdateRefused when it cannot be done)."""
        spec, _ = self._following(service)
        return self._controller.updates.rollback_now(service, spec)

    def pin(self, service: str, digest: str) -> str:
        """`healerctl pin SERVICE DIGEST`, or unpin (`digest` ""): the checker moves it."""
        _, declared = self._following(service)
        if digest and not DIGEST_RE.fullmatch(digest):
            raise UpdateRefused(f"{digest[:80]!r} is not a digest such as sha256:<64 hex digits>")
        said = self._controller.updates.set_pin(service, declared, digest)
        self.updates.kick()
        return said

    def update_view(self, service: str, now: float) -> dict[str, object] | None:
        """What the updater says of `service` (status, describe): its latest word and
        when (a day long), an operator's pin, and its digest history."""
        updates = self._controller.updates
        said, pinned, history = (
            updates.said(service),
            updates.pinned(service),
            updates.history(service),
        )
        if said is None and not pinned and not history:
            return None
        return {
            "note": said.text if said is not None else "",
            "at": said.at if said is not None else None,
            "age_seconds": round(now - said.at, 1) if said is not None else None,
            "pinned": pinned,
            "history": [
                {"at": h.at, "what": h.what, "digest": h.digest, "text": h.text} for h in history
            ],
        }

    def _following(self, service: str) -> tuple[ServiceSpec, str]:
        """The service's spec as it runs (its tag pinned) and the tag it follows."""
        spec = self._controller.desired.services.get(service)
        pin = self._controller.updates.pin(service)
        if spec is None:
            raise UpdateRefused(f"no such service: {service}")
        if not follows(spec) and pin is None:
            raise UpdateRefused(
                f"{service} does not follow its tag (x-healerd: {{auto_update: registry}} "
                "or notify)"
            )
        return spec, pin.declared if pin is not None else spec.image

    def images_view(self, reader: Reader = PRIVILEGED) -> dict[str, Any]:
        """`healerctl images` (healerd.daemon.imageview): one image list, on `reader`'s
        budget."""
        updates = self._controller.updates
        declared = self._declared_images() or {}
        pins = {s: updates.pin(s) for s in declared}
        known = Known(
            declared=declared,
            pinned={s: f"{p.declared}@{p.digest}" for s, p in pins.items() if p is not None},
            book=self.dir.book(),
            pulled_refs=frozenset(self._controller.pulled_images() | updates.pulled()),
            pulled_ids=self.gc.mine(),
            built_refs=self._controller.built_images(),
        )
        listed = self._controller.local_images(reader)
        return images_payload(listed, known, self.dir.refused_here(), self._images_dir)

    def _install_bundle(self, path: Path) -> str | None:
        """A bundle dropped into the images directory: installed into
        `state_dir/bundles` (the daemon may not write /etc under its unit), which the
        reload reads as it reads conf.d (healerd.daemon.reload); None, or why not."""
        s = self._settings()
        try:
            bundles_dir(s.state_dir).mkdir(mode=0o700, exist_ok=True)
            install_bundle(
                path,
                bundles_dir(s.state_dir),
                cast(EngineForBundle, self._engine),
                strict_modes=s.strict_modes,
                environment=s.interpolate_environment,
            )
        except EngineUnavailable:
            raise  # no verdict: tried again (healerd.daemon.imagesdir)
        except (BundleError, EngineError, OSError) as exc:
            return str(exc)
        self.reload()
        return None

    def _loaded_declared(self) -> frozenset[str]:
        """The IDs of images loaded from images_dir that a declared service names."""
        return declared_loaded(self.dir.book(), (self._declared_images() or {}).values())

    def _trim_later(self, repository: str, keep: tuple[str, ...]) -> None:
        """In a thread: removing images must not hold the reconcile worker that proved
        the update."""
        threading.Thread(
            target=self.gc.trim, args=(repository, keep), name="healerd-trim", daemon=True
        ).start()

    def _data_root_disk(self) -> tuple[int, int] | None:
        """(total, free) bytes of the engine's data root filesystem, None when unknown."""
        root = self._controller.engine_data_root
        if not root:
            return None
        sample = self._probe.sample(root)
        if sample.disk_total is None or sample.disk_free is None:
            return None
        return sample.disk_total, sample.disk_free

    def _declared_images(self) -> dict[str, str] | None:
        """Each declared service's image (pinned where it follows its tag); None while a
        file broken since start may declare more (then image GC removes nothing)."""
        desired = self._controller.desired
        if desired.hold_orphans:
            return None
        return {name: spec.image for name, spec in desired.services.items()}
