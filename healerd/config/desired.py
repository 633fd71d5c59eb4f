"""The desired state: every service file merged, with each file's last good version remembered.

A typo in one file must never take running services down, so a broken file keeps what it
last declared, and while a broken file has never been good nothing undeclared is removed.

Which names in conf.d are service files (`is_config_name`, shared with the file watcher):
only `*.yaml` and `*.yml`, and never what editors, package managers and config tools
leave behind: dotfiles (`.x.yaml.swp`, `.#x.yaml`, temporary files of atomic writes),
`*~`, `#*#`, `*.swp`, `*.swx`, `*.tmp`, `*.bak`, `*.orig`, `*.dpkg-old`, `*.dpkg-new`,
`*.dpkg-dist`, `*.dpkg-tmp`, `*.rpmnew`, `*.rpmsave`.

Conflicts between files (one service name declared twice, one fixed host port published
by two services) are settled in favour of what is already applied: the service that held
the name or the port in the previous state keeps it; on the first merge after a start,
the declaration that the running containers name as their source file, then the one
whose spec hash they carry (`prefer_running`), so a restart of healerd does not turn a
refused file into the applied one; otherwise the file first in name order does. The
other file is refused as a whole, like a file with an error, so its last good version
(if any) stands.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

from healerd.config.errors import ConfigError
from healerd.config.ports import describe_port, port_clash
from healerd.config.projectdir import is_project_dir, load_project_dir
from healerd.config.servicefile import FileResult, load_service_file
from healerd.config.trust import trust_problem
from healerd.model import ServiceSpec

CONFIG_SUFFIXES = (".yaml", ".yml")
BUNDLE_SUFFIX = ".bundle"
_Claim = tuple[str, FileResult, str, ServiceSpec]  # file, its version, service, spec
IGNORED_SUFFIXES = (
    "~",
    "#",
    ".swp",
    ".swx",
    ".tmp",
    ".bak",
    ".orig",
    ".dpkg-old",
    ".dpkg-new",
    ".dpkg-dist",
    ".dpkg-tmp",
    ".rpmnew",
    ".rpmsave",
)


def is_config_name(name: str) -> bool:
    """Whether a file name in conf.d is a service file (see the module docstring)."""
    if name.startswith((".", "#")) or name.endswith(IGNORED_SUFFIXES):
        return False
    return name.endswith(CONFIG_SUFFIXES) and os.path.splitext(name)[0] != ""


def is_entry_name(name: str) -> bool:
    """Whether a name in conf.d may be a project directory: not a dotfile nor an editor's
    or package manager's leftover (the directory must also be a project: is_project_dir)."""
    return not (name.startswith((".", "#")) or name.endswith(IGNORED_SUFFIXES))


def is_bundle_name(name: str) -> bool:
    """Whether a name in conf.d is an installed bundle (`<name>.bundle`, a link that
    `healerctl bundle load` swaps whole): read like conf.d, one level deep."""
    return is_entry_name(name) and name.endswith(BUNDLE_SUFFIX) and name != BUNDLE_SUFFIX


def list_config_files(
    conf_dir: Path, known: Collection[str] = (), *, bundles: bool = True
) -> list[Path]:
    """Service files, project directories (healerd.config.projectdir) and, with
    `bundles`, installed bundles (`*.bundle`, a link or a directory) in `conf_dir`,
    sorted by name so that precedence is predictable.

    A project is a directory holding a Compose file or a `.env`, and also, so that a
    project that cannot be read for a while keeps its last good state rather than being
    removed, any link there (one to a directory not mounted yet, or moved, is an error)
    and any directory that was a project in the last read (`known`: full paths). Only
    removing the entry from conf.d removes a project.

    A missing directory declares nothing. Any other listing failure raises OSError:
    callers must keep their previous state rather than read it as "no services".
    """
    try:
        entries = list(conf_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = [
        p
        for p in entries
        if (is_config_name(p.name) and p.is_file())
        or (is_bundle_name(p.name) and bundles and (p.is_dir() or p.is_symlink()))
        or (not is_bundle_name(p.name) and _is_project_entry(p, known, links=bundles))
    ]
    return sorted(files, key=lambda p: p.name)


def _is_project_entry(path: Path, known: Collection[str], *, links: bool = True) -> bool:
    """`links`: in conf.d; a bundle's tree has links only to data directories
    (healerd.daemon.bundledata), never a project."""
    if not is_entry_name(path.name) or is_config_name(path.name):
        return False
    if path.is_symlink() and links:
        return True
    return is_project_dir(path) or (str(path) in known and path.is_dir())


def load_conf_dir(
    conf_dir: Path,
    *,
    strict_modes: bool = True,
    keep: Mapping[str, FileResult | None] = MappingProxyType({}),
    environment: Collection[str] = (),
    known: Collection[str] = (),
    bundles: bool = True,
) -> list[FileResult]:
    """Checks every service file; `file` is the full path, which operators can act on directly.

    With `strict_modes` (the default, as in healerd.yaml), files, conf.d and its parent
    directory must be writable only by their owner, and owned by root or healerd's own
    user. An untrusted directory makes every file in it invalid (their last good versions
    stand) and adds a result for the directory itself, so that nothing undeclared is
    removed while it is untrusted: who could write it could also have deleted files.

    Files named in `keep` (full paths; files still being written) are not read: the
    result given for each stands instead, its result of the previous merge
    (DesiredStore.last_results). None (never read before) makes it a file without a good
    version yet and with no error: it declares nothing, and nothing undeclared is removed
    meanwhile. A kept file that is no longer there is gone as usual.

    `environment`: the variables of healerd's environment that `${VAR}` may read
    (healerd.yaml's interpolate_environment); the files' `.env` are read in any case.
    """
    files = list_config_files(conf_dir, known, bundles=bundles)
    if strict_modes:
        for directory in (conf_dir.parent, conf_dir):
            problem = trust_problem(directory, "directory")
            if problem and conf_dir.is_dir():
                error = ConfigError(str(directory), None, "directory", problem)
                refused = [FileResult(str(path), None, (error,)) for path in files]
                return [*refused, FileResult(str(directory), None, (error,))]
    results: list[FileResult] = []
    for path in files:
        if is_bundle_name(path.name):
            results += _bundle_results(path, keep, strict_modes, environment, known)
        else:
            results.append(_load_or_keep(path, keep, strict_modes, environment))
    return results


def _bundle_results(
    path: Path,
    keep: Mapping[str, FileResult | None],
    strict_modes: bool,
    environment: Collection[str],
    known: Collection[str],
) -> list[FileResult]:
    """An installed bundle's files, as conf.d's (a bundle holds no bundle). A link that
    leads nowhere (its tree removed by hand) is an error of each file it held, so that
    their last good state stands, as for a project that cannot be read."""
    if path.is_dir():
        return load_conf_dir(path, strict_modes=strict_modes, keep=keep,
                             environment=environment, known=known, bundles=False)  # fmt: skip
    error = ConfigError(str(path), None, "bundle", "leads to no directory (its tree is gone)")
    held = sorted(f for f in known if f.startswith(f"{path}/"))
    return [FileResult(f, None, (error,)) for f in held] or [FileResult(str(path), None, (error,))]


def _load_or_keep(
    path: Path,
    keep: Mapping[str, FileResult | None],
    strict_modes: bool,
    environment: Collection[str],
) -> FileResult:
    file = str(path)
    if file not in keep:
        if path.is_dir() or (path.is_symlink() and not is_config_name(path.name)):
            return load_project_dir(path, file, strict_modes=strict_modes, environment=environment)
        return load_service_file(path, file, strict_modes=strict_modes, environment=environment)
    return keep[file] or FileResult(file, None, ())


@dataclass(frozen=True)
class DesiredState:
    """What should run, plus what the daemon must know to act on it safely.

    `errors` is the status to show: every problem of every file, each with file, line,
    column, field and reason. When `hold_orphans` is set, containers of undeclared
    services must be kept: a broken file that was never good might be the one declaring
    them.
    """

    services: Mapping[str, ServiceSpec]
    errors: tuple[ConfigError, ...]
    hold_orphans: bool
    broken_files: tuple[str, ...]
    # Every file and project the scan found (None: not known, a state made by hand): a
    # broken file no longer broken was fixed, or removed.
    files: frozenset[str] | None = None

    @cached_property
    def joiners(self) -> Mapping[str, tuple[str, ...]]:
        """Per service, the services whose containers join its network namespace
        (network_mode service:NAME): a new run of its container leaves theirs with `lo`
        only, so they look again when it starts."""
        out: dict[str, list[str]] = {}
        for spec in self.services.values():
            mode = spec.network_mode or ""
            if mode.startswith("service:"):
                out.setdefault(mode.removeprefix("service:"), []).append(spec.name)
        return {k: tuple(sorted(v)) for k, v in out.items()}


class DesiredStore:
    """Remembers each file's last valid result since the process started (not across restarts)."""

    def __init__(self) -> None:
        self._last_good: dict[str, FileResult] = {}
        self._last: dict[str, FileResult] = {}  # each file's result in the previous update
        self._applied: dict[str, ServiceSpec] = {}  # the previous state's services
        # What ran at start, per service: source files and spec hashes; until the first merge.
        self._running: dict[str, tuple[set[str], set[str]]] = {}

    def prefer_running(self, running: Iterable[tuple[str, str, str]]) -> None:
        """(service, source file, spec hash) of each container found at start: the first
        merge settles conflicts in favour of what runs, as if healerd had never stopped.
        The source file decides first: two declarations may share a hash (they differ
        in replicas, say), and a file edited while healerd was down matches no hash."""
        self._running = {}
        for name, file, spec_hash in running:
            files, hashes = self._running.setdefault(name, (set(), set()))
            if file:
                files.add(file)
            hashes.add(spec_hash)

    def held_by(self, writing: Iterable[Path]) -> list[str]:
        """Projects (healerd.config.projectdir) one of whose files is being written: each
        is kept as it was, like a file being written."""
        busy = {os.path.realpath(p) for p in writing}
        return sorted(
            f
            for f, r in self._last.items()
            if busy.intersection(os.path.realpath(s) for s in r.sources)
        )

    def known(self) -> frozenset[str]:
        """The files and projects of the last update (list_config_files' `known`)."""
        return frozenset(self._last)

    def sources(self, outside: Path | None = None) -> list[str]:
        """Every file the projects of the last update read (for the config watcher),
        but those under `outside` (git sources' trees: healerd writes them itself)."""
        found = [s for r in self._last.values() for s in r.sources]
        return [s for s in found if outside is None or not Path(s).is_relative_to(outside)]

    def last_results(self, files: Iterable[str]) -> dict[str, FileResult | None]:
        """Each file's result in the previous update (None: not in it), for load_conf_dir's
        `keep`: a file being written then stays exactly as it was."""
        return {file: self._last.get(file) for file in files}

    def update(self, results: list[FileResult]) -> DesiredState:
        """Merges one scan of the config directory; `results` must cover every file present."""
        present = {r.file for r in results}
        self._last_good = {f: r for f, r in self._last_good.items() if f in present}
        ordered = sorted(results, key=lambda r: r.file)
        errors: dict[str, list[ConfigError]] = {r.file: list(r.errors) for r in ordered}
        # The version of each file that counts: the new one when valid, else the last good.
        candidates: dict[str, FileResult | None] = {}
        for result in ordered:
            valid = result.services is not None
            candidates[result.file] = result if valid else self._last_good.get(result.file)
        # A new valid version that loses a conflict is refused whole, like a broken file.
        # Falling back may create other conflicts, so repeat (at most once per file).
        refused: set[str] = set()
        for _ in range(len(ordered) + 1):
            losers, _ = self._conflicts(candidates)
            newly = {
                file: errs
                for file, errs in losers.items()
                if file not in refused and candidates[file] is not self._last_good.get(file)
            }
            if not newly:
                break
            for file, errs in newly.items():
                refused.add(file)
                errors[file].extend(errs)
                candidates[file] = self._last_good.get(file)
        # Whatever conflicts remain are between versions applied before: drop the loser.
        remaining, dropped = self._conflicts(candidates)
        services: dict[str, ServiceSpec] = {}
        broken: list[str] = []
        hold_orphans = False
        for result in ordered:
            file = result.file
            good = candidates[file]
            if result.services is not None and file not in refused:
                self._last_good[file] = result
            else:
                broken.append(file)
                hold_orphans = hold_orphans or good is None
            errors[file].extend(remaining.get(file, ()))
            for name, spec in ((good.services or {}) if good else {}).items():
                if (file, name) not in dropped:
                    services[name] = spec
        self._applied = dict(services)
        self._last = {result.file: result for result in ordered}
        self._running = {}
        all_errors = tuple(e for result in ordered for e in errors[result.file])
        return DesiredState(
            MappingProxyType(services), all_errors, hold_orphans, tuple(broken), frozenset(present)
        )

    def _rank(self, claim: _Claim) -> tuple[bool, bool, str, str]:
        """Claims that keep what was applied come first, then file name order."""
        file, _, name, spec = claim
        before = self._applied.get(name)
        if before is None and self._running:
            # First merge after a start: the declaration that runs holds its name and ports.
            files, hashes = self._running.get(name, (set(), set()))
            return (spec.source_file not in files, spec.spec_hash not in hashes, file, name)
        held = before is not None and before.source_file == spec.source_file
        fixed = {(p.host_ip, p.host_port, p.protocol) for p in spec.ports if p.host_port}
        held_ports = (
            held
            and before is not None
            and fixed <= {(p.host_ip, p.host_port, p.protocol) for p in before.ports}
        )
        return (not held, not held_ports, file, name)

    def _conflicts(
        self, candidates: Mapping[str, FileResult | None]
    ) -> tuple[dict[str, list[ConfigError]], set[tuple[str, str]]]:
        """Errors per losing file for every name or fixed host port claimed twice, and the
        losing (file, service) pairs."""
        claims = [
            (file, result, name, spec)
            for file, result in candidates.items()
            if result is not None
            for name, spec in (result.services or {}).items()
        ]
        claims.sort(key=self._rank)
        losers: dict[str, list[ConfigError]] = {}
        dropped: set[tuple[str, str]] = set()
        kept: list[_Claim] = []
        for claim in claims:
            file, result, name, spec = claim
            reason = None
            for other_file, _, other_name, other in kept:
                if other_name == name:
                    reason = (
                        f"declared in both {other_file} and {file}; the one in {other_file} is used"
                    )
                elif (port := port_clash(other, spec)) is not None:
                    reason = (
                        f"{describe_port(port)} is also published by service {other_name!r} "
                        f"in {other_file}: two containers cannot hold one fixed host port; "
                        f"{other_name!r} keeps it"
                    )
                if reason:
                    break
            if reason is None:
                kept.append(claim)
                continue
            line, column = result.lines.get(name), result.columns.get(name)
            losers.setdefault(file, []).append(
                ConfigError(file, line, f"services.{name}", reason, column)
            )
            dropped.add((file, name))
        return losers, dropped
