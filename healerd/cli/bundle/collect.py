"""What a bundle holds, from PATHs read as `healerctl validate` reads them: the conf.d
entries (service files and project directories), every file each one needs, and the
images its services name. Nothing is written here.

An entry keeps its layout relative to where it is read from: a service file's directory,
or a project's own directory (under the name its target has, so that a project keeps
its Compose name on the site). A file an entry needs outside that directory is refused:
on the site it would be the site's own file, or nothing. What an entry needs: every file
the loader read (FileResult.sources: Compose files, `.env`, extended and included
files), its services' env files and secrets (their values: said in a note, and the
archive is written 0600), the files a build context lets through, and bind-mounted
files; a bind-mounted directory is data, not configuration: not bundled (a note).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from healerd.config import DesiredStore, FileResult, load_service_file
from healerd.config.desired import is_bundle_name, list_config_files
from healerd.config.dockerignore import Matcher, read_patterns
from healerd.config.projectdir import is_project_dir, load_project_dir
from healerd.daemon.bundlefile import CONFIG, BundleError
from healerd.model import ServiceSpec

SETTINGS_FILE = "healerd.yaml"


@dataclass
class Entry:
    """One conf.d entry: `name` as it goes into the bundle, `root` where its files are."""

    name: str
    root: Path
    result: FileResult
    project: bool


@dataclass
class Contents:
    files: dict[str, tuple[Path, str]] = field(default_factory=dict)  # path -> (source, why)
    images: dict[str, list[str]] = field(default_factory=dict)  # reference -> services
    entries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _entry(path: Path) -> Entry:
    if path.is_dir():
        root = Path(os.path.realpath(path))
        return Entry(root.name, root, load_project_dir(path, str(path)), True)
    result = load_service_file(path, str(path))
    return Entry(path.name, Path(os.path.abspath(path.parent)), result, False)


def entries_of(paths: list[Path]) -> list[Entry]:
    """The entries PATHs name, each read by the daemon's own loader (healerd.yaml and
    settings files have nothing to bundle). Without the checks of owners and modes:
    those are the site's, made at load on the files as installed there (a bundle may
    well be made from a checkout that is not root's)."""
    out: list[Entry] = []
    for path in paths:
        if path.is_dir() and is_project_dir(path) and not (path / "conf.d").is_dir():
            out.append(_entry(path))
        elif path.is_dir():
            conf_dir = path / "conf.d" if (path / "conf.d").is_dir() else path
            for item in list_config_files(conf_dir):
                bundled = is_bundle_name(item.name)
                out += [
                    _entry(p)
                    for p in (list_config_files(item, bundles=False) if bundled else [item])
                ]
        elif path.name != SETTINGS_FILE:
            out.append(_entry(path))
    return out


def _context_files(context: str) -> list[Path]:
    """The files a build context lets through (.dockerignore applied, as the build and
    the context hash read it)."""
    ignore = Path(context, ".dockerignore")
    patterns = read_patterns(ignore.read_text(errors="replace")) if ignore.exists() else []
    matcher, found = Matcher(patterns), []
    for top, dirs, files in os.walk(context):
        rel_top = os.path.relpath(top, context)
        prefix = "" if rel_top == "." else rel_top + "/"
        dirs[:] = [d for d in dirs if matcher.has_exceptions or not matcher.excluded(prefix + d)]
        found += [Path(top, f) for f in files if not matcher.excluded(prefix + f)]
    return found


def _needed(spec: ServiceSpec) -> list[tuple[Path, str]]:
    out = [(Path(f), "env file (secret values)") for f in spec.env_files]
    out += [(Path(s.source), f"secret or config {s.name} (its value)") for s in spec.secrets]
    if spec.build is not None:
        out += [(p, f"build context of {spec.name}") for p in _context_files(spec.build.context)]
        if spec.build.dockerfile_inline is None:
            out.append((Path(spec.build.context, spec.build.dockerfile), "Dockerfile"))
    for volume in spec.volumes:
        if volume.source.startswith("/") and os.path.isfile(volume.source):
            out.append((Path(volume.source), f"file bind-mounted by {spec.name}"))
    return out


def _add(out: Contents, entry: Entry, source: Path, why: str) -> None:
    real = Path(os.path.realpath(source))
    try:
        rel = real.relative_to(entry.root)
    except ValueError:
        out.errors.append(
            f"{source} ({why}, for {entry.result.file}) is outside {entry.root}: a bundle "
            "holds an entry's files by their place under its directory; move it there"
        )
        return
    path = "/".join((CONFIG, *((entry.name,) if entry.project else ()), *rel.parts))
    if path in out.files and out.files[path][0] != real:
        out.errors.append(f"{source} and {out.files[path][0]} would both be {path}")
        return
    if path not in out.files and "secret" in why:
        out.notes.append(f"{path} holds {why}: the bundle is written mode 0600")
    out.files.setdefault(path, (real, why))


def _data_dirs(out: Contents, entry: Entry, spec: ServiceSpec) -> None:
    for volume in spec.volumes:
        if volume.source.startswith("/") and os.path.isdir(volume.source):
            out.notes.append(
                f"{spec.name}: bind-mounted directory {volume.source} is data: not bundled"
            )


def collect(paths: list[Path]) -> Contents:
    """What a bundle of `paths` holds, or the errors that refuse it (config errors first,
    each naming its file and line)."""
    out = Contents()
    entries = entries_of(paths)
    state = DesiredStore().update([e.result for e in entries])
    out.errors += [str(e) for e in state.errors]
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    out.errors += [f"two entries named {n}: rename one" for n in twice]
    if out.errors:
        return out
    for entry in entries:
        out.entries.append(entry.name)
        own = [entry.result.file] if not entry.project else []
        why = "project file" if entry.project else "service file"
        services = list((entry.result.services or {}).values())
        env = {f for spec in services for f in spec.env_files}  # added below, as secrets
        for file in (*own, *entry.result.sources):
            if file not in env:
                _add(out, entry, Path(file), why)
        for spec in services:
            try:
                for source, why in _needed(spec):
                    _add(out, entry, source, why)
            except OSError as exc:
                out.errors.append(f"{spec.name}: cannot read {exc.filename}: {exc.strerror}")
            _data_dirs(out, entry, spec)
            out.images.setdefault(spec.image, []).append(spec.name)
    return out


def plain_name(text: str) -> str:
    """A bundle's name from an output file's name (`site.tar.gz` -> `site`)."""
    name = Path(text).name
    for suffix in (".gz", ".zst", ".tar"):
        name = name.removesuffix(suffix)
    if not name:
        raise BundleError("the bundle needs a name: give --name")
    return name


__all__ = ["Contents", "Entry", "collect", "entries_of", "plain_name"]
