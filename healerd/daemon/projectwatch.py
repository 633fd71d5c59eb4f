"""The files of project directories, for the config watcher (healerd.config.projectdir).

A project in conf.d is read from files that may sit anywhere (a link's target, an
`extends: file:` elsewhere, an included project): after each reload the daemon tells
the watcher every file the projects read, and the watcher watches their directories
too, under the same close-write rule as conf.d's files. In those directories a new
Compose file or `.env` counts as well (an override file added later changes the
project). A directory appearing or going away in conf.d is a project coming or going.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from healerd.config.desired import is_bundle_name, is_entry_name
from healerd.config.projectdir import COMPOSE_FILES, is_project_dir
from healerd.config.projectread import DOTENV
from healerd.daemon.inotify import Inotify


class WatchLimit(Exception):
    """The inotify watch limit is reached: the watcher polls instead."""


_PROJECT_NAMES = frozenset(
    (*COMPOSE_FILES, DOTENV, *(n.replace("compose.", "compose.override.") for n in COMPOSE_FILES))
)


class ProjectFiles:
    """What the projects read, set from the daemon's thread and read by the watcher's."""

    def __init__(self, conf_d: Path) -> None:
        self.conf_d = conf_d
        self._lock = threading.Lock()
        self._files: frozenset[Path] = frozenset()
        self._projects: frozenset[str] = frozenset()  # names in conf.d that were projects

    def set(self, files: Iterable[str]) -> bool:
        """The files the last reload read; True when their directories changed. Each
        is known by its real directory (one directory reached by two paths is one
        inotify watch) and, for a link, by its target too."""
        new = frozenset(a for f in files for a in aliases(f))
        projects = frozenset(
            n for n in _names(self.conf_d) if is_entry_name(n) and is_project_dir(self.conf_d / n)
        )
        with self._lock:
            before = self.dirs()
            self._files, self._projects = new, projects
            return self.dirs() != before

    def dirs(self) -> frozenset[Path]:
        """The directories to watch besides the config directory and conf.d."""
        own = {self.conf_d, self.conf_d.parent}
        own |= {Path(os.path.realpath(d)) for d in own}
        return frozenset(f.parent for f in self._files) - own

    def relevant(self, directory: Path, name: str, mask_is_dir: bool) -> bool:
        """Whether an event on `directory/name` may change a project."""
        if directory == self.conf_d:
            path = directory / name
            # An installed bundle is a link swapped whole (healerctl bundle load).
            return (
                is_bundle_name(name)
                or path in self._files  # an env file beside the service file
                or (
                    is_entry_name(name)
                    and (mask_is_dir or name in self._projects or is_project_dir(path))
                )
            )
        return (directory / name) in self._files or name in _PROJECT_NAMES

    def sync(
        self, inotify: Inotify, watches: dict[int, Path], events: int, keep: tuple[Path, ...]
    ) -> bool:
        """Watches the directories of project files (and `keep`), only those; True when
        one is new (its files may have changed before the watch was there)."""
        wanted, added = self.dirs(), False
        for wd, path in list(watches.items()):
            if path not in keep and path not in wanted:
                del watches[wd]
                with contextlib.suppress(OSError):
                    inotify.rm_watch(wd)
        for path in wanted - set(watches.values()):
            try:
                watches[inotify.add_watch(path, events)] = path
                added = True
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise WatchLimit(f"cannot watch {path}: the inotify watch limit") from exc
        return added

    def snapshot_paths(self) -> list[Path]:
        """For polling: every file a project read, and the Compose names of every
        directory in conf.d (a project appearing)."""
        paths = set(self._files)
        for name in _names(self.conf_d):
            if is_entry_name(name) and (self.conf_d / name).is_dir():
                paths.update(self.conf_d / name / n for n in _PROJECT_NAMES)
        return sorted(paths)


def aliases(file: str) -> set[Path]:
    """The paths an event on `file` may come under: in its real directory, and its target
    when it is a link (an edit of the target changes the project too)."""
    path = Path(file)
    return {Path(os.path.realpath(path.parent)) / path.name, Path(os.path.realpath(path))}


def _names(directory: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return os.listdir(directory)
    return []
