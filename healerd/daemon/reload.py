"""Reading the configuration again (SIGHUP, a file written, the API, every resync):
healerd.yaml's node keys that take effect at once, and conf.d's services. A bad file
changes nothing, nor does one still being written; errors are said once, not at every
resync. The daemon applies what these return (healerd.daemon.main)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healerd.config import (
    RELOADABLE,
    ConfigError,
    DesiredState,
    DesiredStore,
    FileResult,
    Settings,
    SettingsError,
    load_conf_dir,
    load_settings,
)
from healerd.daemon.imagework import bundles_dir
from healerd.daemon.sourceload import source_results
from healerd.daemon.sources import Source
from healerd.engine import Engine, EngineError

log = logging.getLogger("healerd")


@dataclass
class ReloadMemory:
    """What a reload remembers of the ones before."""

    file_settings: Settings | None = None  # healerd.yaml as last read
    settings_errors: list[str] = field(default_factory=list)  # its errors, said once
    config_errors: tuple[ConfigError, ...] = ()  # conf.d's, said once
    warned_missing_dir: bool = False
    # Which reloads began, and the last that ended (its number, whether it applied): a
    # request is answered by a reload begun after it, as one under way when it came
    # (a resync's) may have read the files before the change it asks for.
    begun: int = 0
    ended: tuple[int, bool] = (0, False)

    def begin(self) -> int:
        self.begun += 1  # the daemon's loop thread only
        return self.begun

    def served(self, ticket: int) -> bool | None:
        """Whether a reload begun after `ticket` (`begun` then) applied; None: none ended."""
        n, applied = self.ended
        return applied if n > ticket else None


def node_changes(path: Path, writing: Collection[Path], memo: ReloadMemory) -> dict[str, Any]:
    """healerd.yaml's keys that take effect at once and changed since it was last read
    (the others are said to wait for the next start); nothing while the file is bad or
    being written (the watcher reloads once it is closed)."""
    if path in writing:
        log.info("%s is being written; settings unchanged until it is complete", path)
        return {}
    try:
        new = load_settings(path)
    except SettingsError as exc:
        # Said once per distinct error, not at every resync.
        messages = [str(e) for e in exc.errors]
        if messages != memo.settings_errors:
            for msg in messages:
                log.error("settings not reloaded: %s", msg)
            memo.settings_errors = messages
        return {}
    if memo.settings_errors:
        log.info("healerd.yaml is valid again")
        memo.settings_errors = []
    old, memo.file_settings = memo.file_settings, new
    if old is None or new == old:
        return {}
    apply = {k: getattr(new, k) for k in RELOADABLE if getattr(new, k) != getattr(old, k)}
    later = sorted(
        k
        for k in vars(new)
        if k not in RELOADABLE and k != "config_dir" and getattr(new, k) != getattr(old, k)
    )
    if later:
        log.warning("healerd.yaml: %s changed; takes effect at the next start", ", ".join(later))
    return apply


def _results(
    settings: Settings,
    conf_dir: Path,
    store: DesiredStore,
    held: list[str],
    sources: Iterable[Source],
) -> list[FileResult]:
    env, strict, known = settings.interpolate_environment, settings.strict_modes, store.known()
    results = load_conf_dir(
        conf_dir, strict_modes=strict, keep=store.last_results(held), environment=env, known=known
    )
    results += source_results(sources, strict_modes=strict, environment=env)
    bundles = bundles_dir(settings.state_dir)  # those dropped into the images directory
    if bundles.is_dir():
        results += load_conf_dir(bundles, strict_modes=strict, environment=env, known=known)
    return results


def read_conf_d(
    settings: Settings,
    writing: Collection[Path],
    store: DesiredStore,
    memo: ReloadMemory,
    sources: Iterable[Source] = (),
) -> DesiredState | None:
    """Every service file again; broken files keep their last good services, and so do
    files still being written (their state of the previous reload stands). None: the
    directory cannot be read (the current desired state stays)."""
    conf_dir = settings.config_dir / "conf.d"
    held = sorted(str(p) for p in writing if p.parent == conf_dir)
    held += store.held_by(writing)
    for file in held:
        log.info("%s is being written; its last version stands until it is complete", file)
    try:
        results = _results(settings, conf_dir, store, held, sources)
    except OSError as exc:
        log.error("cannot read %s: %s; keeping the current desired state", conf_dir, exc)
        return None
    except Exception:  # a bug must not end healerd: the last good state stands
        log.exception("reading the configuration failed unexpectedly; keeping the current one")
        return None
    state = store.update(results)
    if not conf_dir.is_dir():
        # A directory that vanished (a failed mount, a typo in --config-dir) must not
        # read as "remove everything": containers of undeclared services stay.
        if not memo.warned_missing_dir:
            log.warning("%s does not exist: no services declared, none removed", conf_dir)
            memo.warned_missing_dir = True
        state = dataclasses.replace(state, hold_orphans=True)
    else:
        memo.warned_missing_dir = False
    _say_errors(state.errors, memo)
    return state


def _say_errors(errors: tuple[ConfigError, ...], memo: ReloadMemory) -> None:
    if errors != memo.config_errors:
        for err in errors:
            log.error(
                "config error: %s (file skipped; its services keep running as they were)", err
            )
        if not errors and memo.config_errors:
            log.info("config errors resolved")
        memo.config_errors = errors


def prefer_what_runs(engine: Engine, store: DesiredStore) -> None:
    """Before the first merge: a service declared in two files keeps the declaration
    its containers run, not the first file by name (which would replace them). One
    list call before READY=1, bounded by engine_timeout like the identity check."""
    try:
        observed = engine.list_managed()
    except EngineError as exc:
        # Then name order decides, as on a first start.
        log.info("engine not listed before the first config merge: %s", exc)
        return
    store.prefer_running((c.service, c.source_file, c.spec_hash) for c in observed)


__all__ = ["ReloadMemory", "node_changes", "prefer_what_runs", "read_conf_d"]
