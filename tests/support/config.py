"""A healerd config dir: healerd.yaml, and service files in conf.d/."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path

from tests.support.busybox_image import COMMAND


class ConfigDir:
    """Writes files the way an operator's editor does: atomically (a temporary file
    renamed over the old one), or in place (truncated, then written) when asked."""

    def __init__(self, root: Path, image: str, command: Sequence[str] = COMMAND) -> None:
        self.root = root
        self.conf_d = root / "conf.d"
        self.conf_d.mkdir(parents=True, exist_ok=True)
        self.image = image
        self.command = list(command)

    def settings(self, text: str) -> Path:
        """Write healerd.yaml."""
        return self._write(self.root / "healerd.yaml", text, in_place=False)

    def write(self, name: str, text: str, *, in_place: bool = False) -> Path:
        """Write conf.d/`name` (`text` is dedented)."""
        return self._write(self.conf_d / name, text, in_place=in_place)

    @staticmethod
    def _write(path: Path, text: str, *, in_place: bool) -> Path:
        text = textwrap.dedent(text)
        if in_place:
            with open(path, "w") as f:
                f.write(text)
        else:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
        return path

    def service(self, file: str, name: str, replicas: int, **fields: object) -> Path:
        """Write `file` with one service in the usual test shape: this dir's image and
        command (`command=` overrides it, as YAML), a 2 s stop grace period, and any
        further `fields` as `key: value` lines."""
        command = fields.pop("command", json.dumps(self.command))
        lines = [
            "services:",
            f"  {name}:",
            f"    image: {self.image}",
            f"    command: {command}",
            "    stop_grace_period: 2s",
            f"    replicas: {replicas}",
            *(f"    {key}: {value}" for key, value in fields.items()),
        ]
        return self.write(file, "\n".join(lines) + "\n")


def trusted_copy(src: Path, into: Path) -> Path:
    """A copy of a file or directory of the repository under `into` (a test's tmp_path):
    healerd refuses config whose directories others can write, and a checkout may well
    live under one (a clone in /tmp). Returns the copy's path."""
    dest = into / "repo-copy" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copy2(src, dest)
    return dest


def service_file(pull_policy: str = "missing", **services: str) -> str:
    """One file, each service NAME=IMAGE with the test command and one replica."""
    lines = ["services:"]
    for name, image in services.items():
        lines += [
            f"  {name}:",
            f"    image: {image}",
            f"    command: {json.dumps(COMMAND)}",
            "    stop_grace_period: 2s",
            f"    pull_policy: {pull_policy}",
        ]
    return "\n".join(lines) + "\n"
