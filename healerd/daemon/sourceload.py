"""Git sources' trees loaded like conf.d (issue 35 point 3), one commit all-or-nothing.

A source's verified tree (healerd.daemon.sources, `trees/<commit>/`) holds service files
and project directories as conf.d does. The services are read from
`state_dir/sources/<name>/live`, a directory that always holds the applied commit's
files: every path a service holds (bind sources, env files, build contexts, the file it
came from) is the same from one commit to the next, so a commit that changes one stack
rolls no other; and a running container's bind mount of a directory there sees the new
commit's files, as it would see an operator's edit in conf.d, instead of a pruned tree.

A candidate commit is first checked where it was checked out. If any of its files has
an error (or its tree cannot be read), it is refused whole: the source's status says why,
it is not tried again, and `live` is not touched. Only a commit that checks clean is
copied into `live` (file by file, each renamed into place; what it no longer has is
removed; `live.commit` names the commit once the copy is whole, so a copy cut short is
done again) and accepted. A first commit with an error declares nothing. A source with no
tree yet (never fetched since the state directory was made) declares nothing and holds
every undeclared container, as a file that was never good does: a host that boots
offline removes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from pathlib import Path

from healerd.config import ConfigError, FileResult, load_conf_dir
from healerd.daemon.sources import Source
from healerd.daemon.treesync import sync_tree

log = logging.getLogger("healerd.sources")
LIVE = "live"


def live_path(source: Source) -> Path:
    return source.root / LIVE


def _read(source: Source, tree: Path, strict: bool, env: Collection[str]) -> list[FileResult]:
    """The tree's results; one with an error when it is not there or cannot be read (a
    missing tree must not read as "no services")."""
    shown = str(tree)
    try:
        if not tree.is_dir():
            raise FileNotFoundError(f"{tree} is not there")
        return load_conf_dir(tree, strict_modes=strict, environment=env)
    except OSError as exc:
        log.error("source %s: cannot read %s: %s", source.conf.name, tree, exc)
        error = ConfigError(shown, None, "directory", f"cannot read the source's tree: {exc}")
        return [FileResult(shown, None, (error,))]


def _held(source: Source, why: str) -> list[FileResult]:
    """Nothing declared, and every undeclared container held (no error to show)."""
    return [FileResult(f"{live_path(source)} ({why})", None, ())]


def source_results(
    sources: Iterable[Source], *, strict_modes: bool, environment: Collection[str] = ()
) -> list[FileResult]:
    """Every source's files, as load_conf_dir gives conf.d's."""
    results: list[FileResult] = []
    for source in sources:
        results += _load(source, strict_modes, environment)
    return results


def _load(source: Source, strict: bool, env: Collection[str]) -> list[FileResult]:
    wanted, applied = source.wanted(), source.applied()
    if wanted is None:
        return _held(source, "not fetched yet")
    commit, tree = wanted
    live = live_path(source)
    if applied is None or commit != applied[0]:
        errors = [e for r in _read(source, tree, strict, env) for e in r.errors]
        if errors:
            more = f" (and {len(errors) - 1} more)" if errors[1:] else ""
            log.error("source %s: commit %s refused: %s", source.conf.name, commit[:12], errors[0])
            source.refuse(commit, f"{errors[0]}{more}")
            if applied is None:
                return _held(source, "no good commit yet")
            return _read(source, live, strict, env)
        if not _sync(source, commit, tree):
            return _held(source, "live not updated")
        source.accept(commit)
        return _read(source, live, strict, env)
    # A sync cut short, or a state directory without one: done (again) first.
    if _synced(source) != commit and not _sync(source, commit, tree):
        return _held(source, "live not updated")
    return _read(source, live, strict, env)


def _marker(source: Source) -> Path:
    return source.root / f"{LIVE}.commit"


def _synced(source: Source) -> str:
    try:
        return _marker(source).read_text().strip()
    except OSError:
        return ""


def _sync(source: Source, commit: str, tree: Path) -> bool:
    """`live` made to hold `commit`'s tree; the marker says so only once it does. False
    (said in the log) when it could not be: nothing is removed meanwhile."""
    marker = _marker(source)
    try:
        marker.unlink(missing_ok=True)
        sync_tree(tree, live_path(source))
        tmp = marker.with_name(f".{marker.name}.tmp")
        tmp.write_text(commit + "\n")
        tmp.replace(marker)
    except OSError as exc:
        log.error("source %s: cannot update %s: %s", source.conf.name, live_path(source), exc)
        return False
    return True
