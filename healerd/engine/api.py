"""What the core needs from a container engine, by role, without naming docker.

Code that needs one role types against it (image GC an `ImageStore`, the event watcher
an `EventSource`); `Engine` is all of them, for the loop. An adapter (the Docker one:
healerd.engine.docker) implements every role and has two fittings the daemon sets: a
`Meter` every request takes from (healerd.engine.pacing) and an `Owner` that decides
which listed containers are healerd's and labels the ones it creates (core/ownership.py
signs them). tests/contract holds every adapter, the unit tests' fake among them, to
the behaviour these docstrings promise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from healerd.engine.pacing import Meter
from healerd.model import BuildSpec, EngineEvent, Hook, ObservedContainer, RegistryAuth, ServiceSpec

# Anonymous volumes a replacement takes over: (volume name, mount point).
Inherited = Sequence[tuple[str, str]]


class EngineError(Exception):
    """The engine answered with an error; the pass backs off and retries."""


class Unsupported(EngineError):
    """This engine cannot do it at all (Podman 4.3 has no restart policy update): no
    retry helps."""


class EngineUnavailable(EngineError):
    """The engine could not be reached at all (socket missing, refused, timed out)."""


class NameConflict(EngineError):
    """The container name is taken; the caller picks another name."""


class CannotRestart(EngineError):
    """The container can never run again as it is: it is gone or being removed (`gone`),
    or a network or mount source it names is gone. A new container is what heals it."""

    def __init__(self, message: str, *, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


class ImageMissing(EngineError):
    """The image is not present locally."""


class ImagePullFailed(EngineError):
    """The registry could not deliver the image."""


class ImageLoadFailed(EngineError):
    """The engine refused an image archive (`docker load`): the message says why."""


class ImageBuildFailed(EngineError):
    """A build failed: the message holds the builder's error and its last lines."""


@dataclass(frozen=True)
class Death:
    """How a container's run ended, as the engine recorded it."""

    exit_code: int | None
    oom_killed: bool
    # When its last run ended (RFC 3339; "" if none did): while it runs again, the end
    # of the run before, which its output up to then is all of.
    finished_at: str
    error: str = ""
    # When its latest run began (RFC 3339; "" if never), and whether it runs after a run
    # of it ended (started again: `finished_at` is the earlier run's end).
    started_at: str = ""
    ran_before: bool = False


@dataclass(frozen=True)
class LocalImage:
    """One image of the engine's local store, as its image list shows it."""

    id: str
    tags: tuple[str, ...]  # repo:tag references ("<none>:<none>" dropped)
    digests: tuple[str, ...]  # repo@sha256:... references
    created: float  # when the image was built (epoch seconds), not when it was pulled
    size: int  # bytes, shared layers included


@dataclass(frozen=True)
class HookRun:
    """How a command run in a container ended: its exit code (None: it passed its time
    and was left running), and the last lines of its output (stdout and stderr as they
    came, at most HOOK_TAIL_BYTES)."""

    exit_code: int | None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


# How much of a hook's output is kept (its last bytes), as docker compose keeps it.
HOOK_TAIL_BYTES = 2048


class LogStream:
    """A container's output (stdout and stderr as the engine interleaves them), in
    chunks of bounded size read from the engine as they are consumed: nothing holds the
    whole log. A reader that stops early (at a byte cap, or its client gone) closes it,
    which ends the engine's response; iterating raises EngineError subclasses only."""

    def __init__(self, chunks: Iterable[bytes], close: Callable[[], None] | None = None) -> None:
        self._chunks = chunks
        self._close = close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._chunks)

    def close(self) -> None:
        close, self._close = self._close, None
        if close is not None:
            close()

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, limit: int | None = None) -> bytes:
        """All of it (at most `limit` bytes), then closed: for tests and small outputs."""
        out = bytearray()
        with self:
            for chunk in self:
                out += chunk
                if limit is not None and len(out) >= limit:
                    del out[limit:]
                    break
        return bytes(out)


class Owner(Protocol):
    """Which containers with healerd's labels are healerd's own, and how a create marks
    one so: an adapter passes what `list_managed` finds through `mine` and the labels of
    `create_and_start` through `labels`, and nothing else."""

    def mine(
        self, listed: list[ObservedContainer], service: str | None
    ) -> list[ObservedContainer]: ...

    def labels(self, spec: ServiceSpec, name: str, given: Mapping[str, str]) -> dict[str, str]: ...


class Labelled:
    """Every container with healerd's labels is healerd's (no host key: tests)."""

    def mine(self, listed: list[ObservedContainer], service: str | None) -> list[ObservedContainer]:
        return listed

    def labels(self, spec: ServiceSpec, name: str, given: Mapping[str, str]) -> dict[str, str]:
        return dict(given)


class EngineInfo(Protocol):
    def version(self) -> str:
        """The engine's version string; raises EngineUnavailable when unreachable."""
        ...

    def api_version(self) -> str | None:
        """The Docker API version healerd speaks with the engine, negotiated when it
        first answered (None before; no request)."""
        ...

    def engine_kind(self) -> str | None:
        """ "docker" or "podman" (its Docker-compatible socket), from the same answer as
        api_version (None before; no request)."""
        ...

    def identity(self) -> str:
        """Who the engine is, the same at any address: `docker info`'s ID and data root
        ("" if unknown)."""
        ...

    def data_root(self) -> str | None:
        """Where the engine keeps images and containers (for disk figures)."""
        ...


class ContainerRuntime(Protocol):
    def list_managed(self, service: str | None = None) -> list[ObservedContainer]:
        """Every healerd-labelled container (or only `service`'s) that the owner calls
        its own, running or not, in one list call; health and exit code as the list
        shows them (no inspect per container)."""
        ...

    def create_and_start(
        self, spec: ServiceSpec, name: str, labels: Mapping[str, str], inherit: Inherited = ()
    ) -> str:
        """Create and start one container of `spec` named `name`, with healerd's `labels`
        (as the owner marks them) added to the spec's own; returns its id. `inherit`:
        anonymous volumes of the container it replaces, mounted again where the spec
        or its image still declares them. NameConflict when the name is taken. A start
        that fails leaves no container behind, nor the anonymous volumes made for it."""
        ...

    def start(self, container: ObservedContainer) -> None:
        """Start a stopped container again (already running is success); raises
        CannotRestart when only a new container can heal it (`gone`: it is)."""
        ...

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        """Stop (unpausing first) and keep the container; already gone is success."""
        ...

    def rename(self, container: ObservedContainer, name: str) -> None:
        """Give the container another name (NameConflict when it is taken)."""
        ...

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        """Stop (gracefully, if running) and remove; a container already gone is success.
        `stop_timeout` None keeps the container's own stop timeout. Its anonymous volumes
        go too, unless another container still uses them."""
        ...

    def logs(
        self, container_id: str, tail: int | None, since: float | None, until: float | None = None
    ) -> LogStream:
        """The container's output (stdout and stderr), streamed: the caller closes it. The
        last `tail` lines (None: all), written from `since` until `until` (wall clock;
        None: no bound). An `until` before the container's last start shows the runs
        before it. The engine takes `tail` from the whole log first and filters by time
        after (json-file): with `until`, a `tail` may leave nothing."""
        ...

    def death(self, container_id: str) -> Death:
        """How the container's last run ended (one inspect)."""
        ...

    def exec_hook(self, container_id: str, hook: Hook, timeout: float) -> HookRun:
        """Run `hook` in the running container (an exec, no TTY; the hook's environment
        on top of the container's) and wait for its end, at most `timeout` seconds in
        all: then it is left running in the container (no engine API ends an exec) and
        the answer's exit code is None. No thread or connection outlives the call.
        Raises EngineError when the engine refuses it (the container is not running or
        is gone, the user does not exist)."""
        ...


class EventSource(Protocol):
    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        """Block reading the event stream, calling `on_connected` once the stream is
        subscribed and `on_event` for each event of a healerd-labelled container (its
        action as an EngineAction); returns or raises when the stream ends."""
        ...

    def stop_watch(self) -> None:
        """Make a running `watch` return soon (called from another thread)."""
        ...


class ImageStore(Protocol):
    def image_present(self, image: str) -> bool:
        """Whether the image is in the engine's local store."""
        ...

    def image_size_hint(self, image: str) -> int | None:
        """The size of the largest local image of the same repository (any tag), as a
        guess of what a pull of `image` takes on disk; None if there is none."""
        ...

    def pull(self, image: str, auth: RegistryAuth | None = None) -> None:
        """Pull the image with the credentials of its registry (None: anonymously);
        raises ImagePullFailed with the registry's reason (or EngineUnavailable)."""
        ...

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        """`docker load` of the archive `chunks` make (an uncompressed tar, sent as it is
        read: never whole in memory); the references and image IDs the engine says it
        loaded. Raises ImageLoadFailed with the engine's reason (or EngineUnavailable)."""
        ...

    def image_labels(self, image: str) -> dict[str, str] | None:
        """The local image's labels (its config's); None when it is not present."""
        ...

    def build_image(self, build: BuildSpec, tag: str, *, no_cache: bool = False) -> None:
        """Build `build`'s context as `docker build` sends it (.dockerignore applied) with
        the engine's classic build API, never pulling, intermediate containers removed;
        tag it `tag`, labelled with `build.labels` and LABEL_CONTEXT_HASH. Raises
        ImageBuildFailed with the builder's error and last lines (or EngineUnavailable)."""
        ...

    def local_digests(self, image: str) -> tuple[str, ...]:
        """The local image's repository digests (`repo@sha256:...`); () when it came from
        no registry; raises ImageMissing when it is not there."""
        ...

    def list_images(self) -> list[LocalImage]:
        """Every top-level image of the local store (dangling ones too), in one call."""
        ...

    def images_in_use(self) -> set[str]:
        """The image IDs of every container on the engine, running or not, healerd's or
        not, in one list call."""
        ...

    def remove_image(self, image_id: str) -> bool:
        """Remove an image by ID, never forced (its untagged parent layers go too). False
        when the engine refuses because a container uses it or it is gone: no error."""
        ...


class ImageArchive(Protocol):
    """Images as `docker save` writes them and `docker load` reads them: bundles for
    hosts with no registry (healerctl bundle). Not part of `Engine`: the loop never
    needs it."""

    def save_images(self, refs: Sequence[str]) -> Iterator[bytes]:
        """One archive of every image in `refs` (layers shared once), in pieces as the
        engine sends them; ImageMissing names an image that is not there."""
        ...

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        """`docker load` of the archive `chunks` make (sent as they are read: never whole
        in memory); the references the engine says it loaded. ImageLoadFailed with the
        engine's reason (a corrupt archive). The images directory's (ImageStore's)."""
        ...


class Registry(Protocol):
    def registry_digest(self, image: str, auth: RegistryAuth | None = None) -> str:
        """The digest the registry gives for `image`'s tag now (one manifest request
        through the engine, no pull); raises ImagePullFailed with the registry's reason."""
        ...


class ProjectResources(Protocol):
    def prune_volumes(self, keep: AbstractSet[str], dry_run: bool) -> list[str]:
        """Remove the named volumes healerd made for a project that are not in `keep` and
        that no container uses (the engine's `dangling`); returns their names."""
        ...

    def prune_networks(self, keep: AbstractSet[str]) -> bool:
        """Remove the networks healerd made for a project (labelled) that are not in
        `keep`; one still in use stays. True when none is left to remove."""
        ...

    def volume_path(self, name: str) -> str:
        """The host directory that holds the files of the volume `name` (its mount
        point, absolute), for a snapshot copied on this host (one inspect). EngineError
        when there is no such volume, or when its files are not in a host directory of
        their own: a driver other than `local`, or `local` with driver options (an NFS
        or bind device, mounted only while a container uses it)."""
        ...


class RestartHandOff(Protocol):
    def set_restart_policy(self, container_id: str, policy: str) -> None:
        """The engine's own restart policy of a container ("no", "unless-stopped"), in
        place: what keeps healerd's containers while healerd is stopped (handoff.py). A
        container that is gone is no error."""
        ...


class ContainerFiles(Protocol):
    def file_time(self, container_id: str, path: str) -> float | None:
        """The modification time (wall clock) of `path` in the container, None when it
        is not there (nor the container). Read through the engine's archive endpoint,
        not a command in the container: an image without a shell answers too."""
        ...


class Engine(
    EngineInfo,
    ContainerFiles,
    ContainerRuntime,
    EventSource,
    ImageStore,
    Registry,
    ProjectResources,
    RestartHandOff,
    Protocol,
):
    """Every role: what the loop is given. `meter`: the budget each request takes from;
    `owner`: whose containers list_managed shows and create_and_start marks."""

    meter: Meter
    owner: Owner
