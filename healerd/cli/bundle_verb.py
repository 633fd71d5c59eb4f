"""`healerctl bundle create|load`: service files, project directories and their images
carried as one archive to a host with no registry (README, "Bundles for air-gapped
sites"). Both talk to the engine directly, as healerd does (healerd.yaml's docker_host,
else $DOCKER_HOST, else the local socket), not through the daemon: a bundle is made on
a machine that may run no healerd, and loaded before healerd has anything to run.
Building the parser loads neither the config package nor the engine."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any, Protocol, TextIO

from healerd import paths

EXIT_OK, EXIT_NO = 0, 1


class CtlLike(Protocol):
    args: argparse.Namespace
    out: TextIO
    err: TextIO


def _settings(config_dir: Path) -> Any:
    """healerd.yaml's settings (its engine, strict modes, conf.d); the defaults where
    there is none (a machine that makes bundles may run no healerd)."""
    from healerd.config import Settings, load_settings

    file = config_dir / "healerd.yaml"
    settings = load_settings(file) if os.path.lexists(file) else Settings()
    return dataclasses.replace(settings, config_dir=config_dir)


def _engine(settings: Any) -> Any:
    from healerd.daemon.engineaddr import connect

    return connect(settings, os.environ)


def create(ctl: CtlLike) -> int:
    from healerd.cli.bundle.collect import collect, plain_name
    from healerd.cli.bundle.create import write_bundle
    from healerd.config import SettingsError
    from healerd.daemon.bundlefile import BundleError
    from healerd.engine import EngineError

    a = ctl.args
    sources = [Path(p) for p in a.paths] or [Path(a.config_dir) / "conf.d"]
    contents = collect(sources)
    for line in contents.errors:
        ctl.err.write(f"healerctl: {line}\n")
    if contents.errors:
        ctl.err.write(f"healerctl: {len(contents.errors)} problem(s): no bundle written\n")
        return EXIT_NO
    try:
        name = a.bundle_name or plain_name(a.bundle_file)
        engine = _engine(_settings(Path(a.config_dir)))
        manifest = write_bundle(contents, name, Path(a.bundle_file), engine, gzip=a.gzip)
    except (BundleError, SettingsError, ValueError) as exc:
        ctl.err.write(f"healerctl: {exc}\n")
        return EXIT_NO
    except EngineError as exc:
        ctl.err.write(f"healerctl: bundle not written: {exc}\n")
        return EXIT_NO
    except OSError as exc:
        ctl.err.write(f"healerctl: cannot write {a.bundle_file}: {exc.strerror or exc}\n")
        return EXIT_NO
    for note in manifest.notes:
        ctl.err.write(f"healerctl: note: {note}\n")
    ctl.out.write(
        f"{a.bundle_file}: bundle {manifest.name}: {len(manifest.entries)} entr(ies), "
        f"{len(manifest.files)} file(s), {len(manifest.images)} image(s) "
        f"({manifest.images_size / 2**20:.1f} MiB)\n"
    )
    return EXIT_OK


def load(ctl: CtlLike) -> int:
    from healerd.config import SettingsError
    from healerd.daemon.bundlefile import BundleError
    from healerd.daemon.bundleinstall import install_bundle
    from healerd.engine import EngineError

    a = ctl.args
    try:
        settings = _settings(Path(a.config_dir))
        engine = _engine(settings)
        done = install_bundle(
            a.bundle, settings.config_dir / "conf.d", engine,
            strict_modes=settings.strict_modes, environment=settings.interpolate_environment,
        )  # fmt: skip
    except (BundleError, SettingsError, ValueError, OSError, EngineError) as exc:
        ctl.err.write(f"healerctl: bundle refused, nothing changed: {exc}\n")
        return EXIT_NO
    word = "replaced" if done.replaced else "installed"
    ctl.out.write(f"bundle {done.name} {word}: {done.link} ({len(done.images)} image(s) loaded)\n")
    return EXIT_OK


def bundle(ctl: CtlLike) -> int:
    return create(ctl) if ctl.args.bundle_verb == "create" else load(ctl)


def add_verbs(verb: Any) -> None:
    sp = verb(
        "bundle",
        "carry service files, project directories and their images to a host with no "
        "registry: create an archive, or load one (no daemon needed)",
        output=False,
    )
    verbs = sp.add_subparsers(dest="bundle_verb", metavar="create|load", required=True)
    make = verbs.add_parser(
        "create",
        help="write PATHs' services and every image they name into one archive",
        description="PATHs are read as `healerctl validate` reads them (default "
        "/etc/healerd/conf.d) and must be valid; every image the services name must be "
        "in the local engine. FILE is written whole, mode 0600 (env files' values may be "
        "in it).",
    )
    make.add_argument("-o", "--file", dest="bundle_file", required=True, metavar="FILE")
    make.add_argument("--name", dest="bundle_name", metavar="NAME",
                      help="the bundle's name on the site: conf.d/NAME.bundle "
                      "(default FILE's name without .tar)")  # fmt: skip
    make.add_argument("--gzip", action="store_true",
                      help="compress (gzip level 1: about half the size, slower)")  # fmt: skip
    make.add_argument("paths", nargs="*", metavar="PATH", help="a service file, project "
                      "directory, conf.d or config directory")  # fmt: skip
    use = verbs.add_parser(
        "load",
        help="check a bundle, load its images, then switch its services in at once",
        description="Every file's sha256 is checked against the manifest, the config "
        "with the daemon's checks, the images loaded and looked up in the engine; only "
        "then does conf.d/NAME.bundle lead to the new version (one rename). On any "
        "failure conf.d is unchanged.",
    )
    use.add_argument("bundle", metavar="FILE")
    for p in (make, use):
        p.add_argument("--config-dir", default=str(paths.CONFIG_DIR),
                       help="the config directory whose healerd.yaml names the engine "
                       "(load: and whose conf.d it goes into; default /etc/healerd)")  # fmt: skip


__all__ = ["add_verbs", "bundle"]
