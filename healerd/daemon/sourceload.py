"""Git sources' trees loaded like conf.d (issue 35 point 3), one commit all-or-nothing.

A source's verified tree (healerd.daemon.sources) holds service files and project
directories as conf.d does. It is read through `state_dir/sources/<name>/live`, a link
swapped atomically to the tree being read, so every path a service holds (bind sources,
env files, build contexts, the file it came from) is the same from one commit to the
next: a commit that changes one stack does not roll the others. The candidate commit is
read first; if any file of it has an error, the commit is refused whole (the source's
status says why, and it is not tried again) and the last good commit's tree is read
instead. A source with no tree yet (never fetched since the state directory was made)
declares nothing and holds every undeclared container, as a file that was never good
does: a host that boots offline removes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from healerd.config import FileResult, load_conf_dir
from healerd.daemon.sources import Source

log = logging.getLogger("healerd.sources")
LIVE = "live"


def live_path(source: Source) -> Path:
    return source.root / LIVE


def _point(source: Source, tree: Path) -> Path:
    """`live` now leads to `tree` (a new link renamed over the old one)."""
    live = live_path(source)
    tmp = source.root / f".{LIVE}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(tree, tmp)
    os.replace(tmp, live)
    return live


def _read(source: Source, tree: Path, strict: bool, env: Collection[str]) -> list[FileResult]:
    try:
        return load_conf_dir(_point(source, tree), strict_modes=strict, environment=env)
    except OSError as exc:
        # Unreadable: what it declared stays (a result without a good version yet).
        log.error("source %s: cannot read %s: %s", source.conf.name, tree, exc)
        return [FileResult(str(live_path(source)), None, ())]


def source_results(
    sources: Iterable[Source], *, strict_modes: bool, environment: Collection[str] = ()
) -> list[FileResult]:
    """Every source's files, as load_conf_dir gives conf.d's."""
    results: list[FileResult] = []
    for source in sources:
        results += _load(source, strict_modes, environment)
    return results


def _load(source: Source, strict: bool, env: Collection[str]) -> list[FileResult]:
    wanted = source.wanted()
    if wanted is None:
        return [FileResult(f"{live_path(source)} (not fetched yet)", None, ())]
    commit, tree = wanted
    results = _read(source, tree, strict, env)
    errors = [e for r in results for e in r.errors]
    if not errors:
        source.accept(commit)  # nothing when it is the applied commit already
        return results
    applied = source.applied()
    if applied is None or applied[0] == commit:
        return results  # the applied commit itself reads badly now: its errors are shown
    log.error("source %s: commit %s refused: %s", source.conf.name, commit[:12], errors[0])
    source.refuse(commit, f"{errors[0]}" + (f" (and {len(errors) - 1} more)" if errors[1:] else ""))
    return _read(source, applied[1], strict, env)
