"""Git sources' trees loaded like conf.d (issue 35 point 3): a good commit is accepted;
a commit with a broken file is refused whole and the last good tree is read instead;
paths stay the same from one commit to the next (no rollout of unchanged stacks); a
source with nothing fetched yet holds every undeclared container."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from healerd.config import DesiredStore
from healerd.daemon.sourceload import live_path, source_results
from healerd.daemon.sources import Source


@dataclass
class Conf:
    name: str = "site"


@dataclass
class FakeSource:
    """The part of healerd.daemon.sources.Source the loader uses."""

    root: Path
    candidate: str = ""
    applied_commit: str = ""
    conf: Conf = field(default_factory=Conf)
    refused: dict[str, str] = field(default_factory=dict)

    def tree(self, commit: str) -> Path:
        return self.root / "trees" / commit

    def wanted(self) -> tuple[str, Path] | None:
        commit = self.candidate or self.applied_commit
        return (commit, self.tree(commit)) if commit else None

    def applied(self) -> tuple[str, Path] | None:
        c = self.applied_commit
        return (c, self.tree(c)) if c else None

    def accept(self, commit: str) -> None:
        if commit == self.candidate:
            self.applied_commit, self.candidate = commit, ""

    def refuse(self, commit: str, reason: str) -> None:
        if commit == self.candidate:
            self.refused[commit], self.candidate = reason, ""


STACK = """\
services:
  {name}:
    image: busybox:{tag}
    volumes: [./site:/srv:ro]
"""


def commit(src: FakeSource, name: str, files: dict[str, str]) -> None:
    for path, text in files.items():
        (src.tree(name) / path).parent.mkdir(parents=True, exist_ok=True)
        (src.tree(name) / path).write_text(text)
    src.candidate = name


def load(src: FakeSource) -> DesiredStore:
    store = DesiredStore()
    store.update(source_results([cast(Source, src)], strict_modes=False))
    return store


def test_a_good_commit_is_accepted_and_its_paths_do_not_name_the_commit(tmp_path: Path) -> None:
    src = FakeSource(tmp_path)
    commit(
        src,
        "c1",
        {
            "web.yaml": STACK.format(name="web", tag=1),
            "db/compose.yaml": STACK.format(name="db", tag=2),
        },
    )
    store = DesiredStore()
    first = store.update(source_results([cast(Source, src)], strict_modes=False))
    assert src.applied_commit == "c1" and not first.errors
    assert first.services["web"].image == "busybox:1"
    web = first.services["web"]
    commit(
        src,
        "c2",
        {
            "web.yaml": STACK.format(name="web", tag=1),
            "db/compose.yaml": STACK.format(name="db", tag=3),
        },
    )
    second = store.update(source_results([cast(Source, src)], strict_modes=False))
    assert src.applied_commit == "c2" and second.services["db"].image == "busybox:3"
    # The same file, the same bind source: web's spec is unchanged by a commit elsewhere.
    assert second.services["web"] == web and second.services["web"].spec_hash == web.spec_hash
    assert web.source_file == str(live_path(cast(Source, src)) / "web.yaml")
    assert [v.source for v in web.volumes] == [str(live_path(cast(Source, src)) / "site")]
    db = second.services["db"]
    assert [v.source for v in db.volumes] == [str(live_path(cast(Source, src)) / "db" / "site")]


def test_a_commit_with_a_broken_file_is_refused_whole(tmp_path: Path) -> None:
    src = FakeSource(tmp_path)
    commit(src, "c1", {"a.yaml": STACK.format(name="web", tag=1), "b.yaml": "services: {}\n"})
    load(src)
    commit(
        src,
        "c2",
        {
            "a.yaml": STACK.format(name="web", tag=2),
            "b.yaml": "services:\n  x:\n    restart: sometimes\n",
        },
    )
    store = DesiredStore()
    state = store.update(source_results([cast(Source, src)], strict_modes=False))
    assert src.applied_commit == "c1" and "c2" in src.refused
    assert "b.yaml" in src.refused["c2"] and "(and 1 more)" in src.refused["c2"]
    # The good file of the refused commit is not applied either: the commit is one unit.
    assert state.services["web"].image == "busybox:1" and not state.errors


def test_nothing_fetched_yet_holds_undeclared_containers(tmp_path: Path) -> None:
    state = DesiredStore().update(
        source_results([cast(Source, FakeSource(tmp_path))], strict_modes=False)
    )
    assert state.hold_orphans and not state.services and not state.errors


def test_a_missing_candidate_tree_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    src = FakeSource(tmp_path)
    commit(src, "c1", {"a.yaml": STACK.format(name="web", tag=1)})
    load(src)
    src.candidate = "c2"  # verified, but its tree is gone (pruned, disk trouble)
    state = DesiredStore().update(source_results([cast(Source, src)], strict_modes=False))
    assert src.applied_commit == "c1" and "c2" in src.refused
    assert state.services["web"].image == "busybox:1"


def test_a_first_commit_with_one_broken_file_declares_nothing(tmp_path: Path) -> None:
    src = FakeSource(tmp_path)
    commit(
        src,
        "c1",
        {"a.yaml": STACK.format(name="web", tag=1), "b.yaml": "services:\n  x: {}\n"},
    )
    state = DesiredStore().update(source_results([cast(Source, src)], strict_modes=False))
    assert "c1" in src.refused and not src.applied_commit
    assert not state.services and state.hold_orphans


def test_live_is_updated_in_place_and_a_cut_short_copy_is_redone(tmp_path: Path) -> None:
    src = FakeSource(tmp_path)
    commit(src, "c1", {"a.yaml": STACK.format(name="web", tag=1), "a/site/index": "one"})
    load(src)
    live = live_path(cast(Source, src))
    site = (live / "a" / "site").stat().st_ino
    commit(src, "c2", {"a.yaml": STACK.format(name="web", tag=2), "a/site/index": "two"})
    (src.tree("c2") / "a" / "gone").mkdir()
    load(src)
    # The directory a container may bind-mount is the same inode, with the new file.
    assert (live / "a" / "site").stat().st_ino == site
    assert (live / "a" / "site" / "index").read_text() == "two"
    assert (live / "a" / "gone").is_dir()
    (src.tree("c2") / "a" / "gone").rmdir()
    (live / "a.yaml").unlink()  # a copy cut short: the marker no longer names c2
    (tmp_path / "live.commit").unlink()
    assert load(src) and (live / "a.yaml").is_file() and not (live / "a" / "gone").exists()
