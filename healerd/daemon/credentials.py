"""The registry credentials in force, from auth.json, read at start and at every reload.

A file that cannot be used (untrusted, readable by others, malformed) is logged once per
distinct problem, with the file and the reason and never a secret, and the credentials
read before stay in force, as a broken healerd.yaml keeps the settings in force. A
credential helper that is missing or untrusted (healerd.config.credhelpers) is logged
and shown the same way, while the rest of the file applies.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from healerd.config.registryauth import (
    RegistryAuthError,
    RegistryCredentials,
    load_registry_auth,
)
from healerd.model import RegistryAuth

log = logging.getLogger("healerd")


class CredentialsFile:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = RegistryCredentials()
        self.error = ""  # why the file was not applied at the last reload ("" if it was)

    def for_image(self, image: str) -> RegistryAuth | None:
        """The credentials for a pull of `image` (called by the pulling worker)."""
        with self._lock:
            current = self._current
        return current.for_image(image)

    def reload(self, path: Path, *, strict: bool) -> bool:
        """Read `path` again (and find its credential helpers again); True when the
        credentials in force changed."""
        try:
            new = load_registry_auth(path, strict=strict)
        except RegistryAuthError as exc:
            if str(exc) != self.error:
                log.error("registry credentials not reloaded, the previous ones stay: %s", exc)
                self.error = str(exc)
            return False
        # A helper that cannot be run fails the pulls that need it, saying why; the
        # rest of the file applies. Shown by status like a file problem.
        refused = "; ".join(new.helper_errors[name] for name in sorted(new.helper_errors))
        if refused and refused != self.error:
            log.error("registry credentials from %s: %s", path, refused)
        elif self.error and not refused:
            log.info("registry credentials file %s is valid again", path)
        self.error = refused
        with self._lock:
            old, self._current = self._current, new
        if new == old:
            return False
        log.info("registry credentials from %s: %s", new.source or path, new.summary())
        return True


__all__ = ["CredentialsFile"]
