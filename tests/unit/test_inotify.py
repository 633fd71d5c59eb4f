"""The ctypes inotify binding on real temporary directories, and its event parser."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from healerd.daemon.inotify import (
    HEADER,
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    Event,
    Inotify,
    parse_events,
)

REPO = Path(__file__).resolve().parents[2]
ALL = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
)


def pack(wd: int, mask: int, cookie: int, name: bytes, pad: int = 0) -> bytes:
    raw = name + b"\0" * (pad or (16 - len(name) % 16 if name else 0))
    return HEADER.pack(wd, mask, cookie, len(raw)) + raw


def names_and_masks(events: list[Event]) -> list[tuple[str, int]]:
    return [(e.name, e.mask) for e in events]


def test_parse_events_reads_headers_names_and_padding() -> None:
    data = (
        pack(1, IN_CREATE, 0, b"a.yaml")
        + pack(2, IN_DELETE_SELF, 0, b"")
        + pack(1, IN_MOVED_TO, 7, b"b.yaml", pad=32)
        + pack(1, IN_CREATE, 0, b"\xff.yaml")  # not UTF-8: kept, not a crash
    )
    assert parse_events(data) == [
        Event(1, IN_CREATE, 0, "a.yaml"),
        Event(2, IN_DELETE_SELF, 0, ""),
        Event(1, IN_MOVED_TO, 7, "b.yaml"),
        Event(1, IN_CREATE, 0, os.fsdecode(b"\xff.yaml")),
    ]
    assert parse_events(b"") == []


def test_events_of_a_write_a_rename_and_a_delete(tmp_path: Path) -> None:
    with Inotify() as ino:
        assert ino.read() == []  # non-blocking: nothing queued, no wait
        wd = ino.add_watch(tmp_path, ALL | IN_ONLYDIR)
        path = tmp_path / "a.yaml"
        with open(path, "w") as f:
            f.write("services: {}\n")
            f.flush()
            assert names_and_masks(ino.read()) == [("a.yaml", IN_CREATE), ("a.yaml", IN_MODIFY)]
        assert names_and_masks(ino.read()) == [("a.yaml", IN_CLOSE_WRITE)]

        os.chmod(path, 0o600)
        path.rename(tmp_path / "b.yaml")
        (tmp_path / "b.yaml").unlink()
        os.mkdir(tmp_path / "sub")
        events = ino.read()
        assert all(e.wd == wd for e in events)
        assert names_and_masks(events) == [
            ("a.yaml", IN_ATTRIB),
            ("a.yaml", IN_MOVED_FROM),
            ("b.yaml", IN_MOVED_TO),
            ("b.yaml", IN_DELETE),
            ("sub", IN_CREATE | IN_ISDIR),
        ]
        moved_from, moved_to = events[1], events[2]
        assert moved_from.cookie == moved_to.cookie != 0

        ino.rm_watch(wd)
        assert names_and_masks(ino.read()) == [("", IN_IGNORED)]
        with pytest.raises(OSError) as exc:
            ino.rm_watch(wd)
        assert exc.value.errno == errno.EINVAL


def test_a_watched_directory_deleted(tmp_path: Path) -> None:
    watched = tmp_path / "conf.d"
    watched.mkdir()
    with Inotify() as ino:
        ino.add_watch(watched, ALL)
        shutil.rmtree(watched)
        masks = [e.mask for e in ino.read()]
        assert masks == [IN_DELETE_SELF, IN_IGNORED]


def test_errors_carry_errno_and_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with Inotify() as ino:
        with pytest.raises(FileNotFoundError) as missing:
            ino.add_watch(tmp_path / "missing", ALL)
        assert missing.value.filename == str(tmp_path / "missing")
        with pytest.raises(NotADirectoryError):
            ino.add_watch(tmp_path / "file", ALL | IN_ONLYDIR)


def test_the_descriptor_is_non_blocking_close_on_exec_and_closed_once(tmp_path: Path) -> None:
    ino = Inotify()
    fd = ino.fileno()
    assert not os.get_blocking(fd)
    assert not os.get_inheritable(fd)
    ino.close()
    ino.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_long_burst_is_read_in_whole_events(tmp_path: Path) -> None:
    with Inotify() as ino:
        ino.add_watch(tmp_path, IN_CREATE)
        names = [f"{i:03d}-" + "x" * 200 for i in range(400)]  # > one 64 KiB read
        for name in names:
            (tmp_path / name).touch()
        seen: list[str] = []
        while batch := ino.read():
            seen.extend(e.name for e in batch)
        assert seen == names


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no system python3")
def test_the_binding_works_on_the_system_python_without_third_party_modules(
    tmp_path: Path,
) -> None:
    """What the Debian package runs: /usr/bin/python3, no site packages at all (-S -I)."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from healerd.daemon.inotify import IN_CLOSE_WRITE, Inotify
        with Inotify() as ino:
            ino.add_watch({str(tmp_path)!r}, IN_CLOSE_WRITE)
            open({str(tmp_path / "a.yaml")!r}, "w").close()
            print([(e.name, e.mask) for e in ino.read()])
        print(sorted(m for m in sys.modules if m.startswith("healerd") or "inotify" in m))
        """
    )
    out = subprocess.run(
        ["/usr/bin/python3", "-S", "-I", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()
    assert out[0] == f"[('a.yaml', {IN_CLOSE_WRITE})]"
    assert out[1] == "['healerd', 'healerd.daemon', 'healerd.daemon.inotify']"


def test_healerd_does_not_need_inotify_simple(tmp_path: Path) -> None:
    """Debian packages no inotify_simple: the daemon still watches with inotify."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["inotify_simple"] = None  # any import of it raises ImportError
        from pathlib import Path
        import healerd.daemon.main
        from healerd.daemon.confwatch import ConfigWatcher
        w = ConfigWatcher(Path({str(tmp_path)!r}), lambda: None, use_inotify=True)
        w.start()
        print(w.mode)
        w.stop()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.stdout.strip() == "inotify", out.stderr
