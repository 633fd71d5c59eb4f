"""Ownership that cannot be borrowed: healerd's containers carry a signature.

Labels alone are no proof: `docker commit` of a healerd container copies its labels into
an image, and anyone with the engine's socket can write them by hand. A container that
healerd would count as a replica, remove or replace must carry `io.healerd.signature`:
an HMAC, with the host key (a secret made at first start, root-only), over the
container's own name and all its `io.healerd.*` labels, the image reference it was made
from (`io.healerd.image`) included. Copied labels do not verify (the name differs; a
name is unique on an engine) and made-up ones cannot be signed. A removed container's
name and labels, replayed on a new container of another image, do not verify either:
the engine lists the container's own image reference, which must be the signed one.
One exception to the name: a `container_name` replacement renames the container it
replaces to `NAME-replaced-<its own id>` before the new one takes NAME; that one verifies
under NAME (an engine that went away before the rename back must not orphan it and its
volumes), but never while a container named NAME carries the same signature (a copy).
While that reference no longer names the container's image (its tag moved, or the image
was removed), Docker lists the image's ID instead: the reference cannot be compared
then, and the container is taken as signed. Signatures of an older healerd (v1: no
image) still verify for containers created before this version first ran with the key
(`v1_until`), never for later ones.

What this does not stop: anyone with the engine's socket (root-equivalent) can tag
their own image with the signed reference, create the container by image ID, or read
the host key itself. The binding stops labels copied onto another image by mistake or
by a tool, not root.

A container that does not verify is left alone: never stopped, removed or counted. It is
reported in `healerctl status` and the events instead. Containers created before the
host key existed are trusted as they are (trust on first use): that is how the
containers of a healerd without signatures, or of a lost key, are recognised once, with
no churn; a later container must verify. The birth time lives in the key file, so it
needs no database.

The name digits of a container show the spec hash salted with the key too: its unsalted
digits (or label) could be matched against guesses of a secret in the spec.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from healerd.core.imagechoice import parse_ref
from healerd.engine import Engine
from healerd.model import (
    ASIDE,
    LABEL_IMAGE,
    LABEL_SERVICE,
    LABEL_SIGNATURE,
    LABEL_SPEC_HASH,
    NAME_HASH_LEN,
    SIGNED_LABELS,
    ObservedContainer,
    ServiceSpec,
)

# The labels an older healerd signed (v1): all but the image reference.
_V1_LABELS = tuple(k for k in SIGNED_LABELS if k != LABEL_IMAGE)


def _repository(ref: str) -> tuple[str, str | None, str | None]:
    """Repository (familiar, without Podman's `localhost/` for local images), tag and
    digest of a reference."""
    r = parse_ref(ref)
    return r.repository.removeprefix("localhost/"), r.tag, r.digest


def _same_image(listed: str, signed: str) -> bool:
    """Whether the engine's spelling of a container's image is the signed reference:
    the same repository (`busybox` is `docker.io/library/busybox`), and the same digest
    when both give one, else the same tag (`latest` when none)."""
    (repo, tag, digest), (s_repo, s_tag, s_digest) = _repository(listed), _repository(signed)
    if repo != s_repo:
        return False
    if digest and s_digest:
        return digest == s_digest
    return (tag or "latest") == (s_tag or "latest")


def image_matches(listed: str, signed: str) -> bool:
    """Whether the image the engine lists for a container fits the reference it was
    signed with: that reference, however spelt; or the image's full ID, which Docker
    lists once the reference names another image (a moved tag) or none."""
    if listed == signed or (listed and signed and _same_image(listed, signed)):
        return True
    return listed.startswith("sha256:") and len(listed) == 71


def aside_of(c: ObservedContainer) -> str:
    """The name a container_name replacement renamed `c` from (`NAME-replaced-<its own
    id>`), "" if it was not renamed so. Signed under that name, it stays healerd's when
    the engine went away before the rename back (its anonymous volumes hold the data)."""
    name, sep, tail = c.name.rpartition(ASIDE)
    return name if sep and name and tail == c.id[:12] else ""


def _signature_of(c: ObservedContainer) -> str:
    return dict(c.owner_labels).get(LABEL_SIGNATURE, "")


def _copies(trusted: list[ObservedContainer]) -> set[str]:
    """The ids of those that verify by a name aside while a container holds that name
    with the same signature: a rename cut short is proven only while nothing does, and
    beside its original such a one is a copy. Names aside are rare: most lists cost one
    `rpartition` a container here."""
    asides = {c.id: name for c in trusted if (name := aside_of(c))}
    if not asides:
        return set()
    names = set(asides.values())
    held = {(c.name, _signature_of(c)) for c in trusted if c.name in names}
    return {c.id for c in trusted if c.id in asides and (asides[c.id], _signature_of(c)) in held}


@dataclass(frozen=True)
class HostKey:
    secret: bytes = b""
    born: float = 0.0  # wall-clock time the key was made
    # Until when v1 signatures (without the image) count: when this version first ran.
    v1_until: float = 0.0

    def __repr__(self) -> str:  # never the secret in a log or a traceback
        return f"HostKey(born={self.born}, v1_until={self.v1_until})"

    def _mac(self, purpose: bytes, message: bytes) -> str:
        return hmac.new(self.secret, purpose + b"\0" + message, hashlib.sha256).hexdigest()

    def sign(self, name: str, labels: Mapping[str, str]) -> str:
        """The signature of a container named `name` carrying `labels`. It covers the
        labels healerd acts on, each of them, the image reference among them, so that
        none can be added or changed; other io.healerd.* labels (an image's, say) mean
        nothing to healerd and are not covered."""
        return self._signature(b"owner-v2", name, labels, SIGNED_LABELS)

    def _signature(
        self, purpose: bytes, name: str, labels: Mapping[str, str], keys: Sequence[str]
    ) -> str:
        values = [labels.get(k, "") for k in keys]
        message = json.dumps([name, values], separators=(",", ":")).encode()
        return self._mac(purpose, message)

    def verifies(self, c: ObservedContainer) -> bool:
        return not self.why_not(c)

    def why_not(self, c: ObservedContainer) -> str:
        """ "" when the container's signature verifies, else why not."""
        labels = dict(c.owner_labels)
        given = labels.get(LABEL_SIGNATURE, "")
        if not given:
            return "no signature"
        if hmac.compare_digest(given, self.sign(c.name, labels)) or (
            (signed_as := aside_of(c)) and hmac.compare_digest(given, self.sign(signed_as, labels))
        ):
            if image_matches(c.image, labels.get(LABEL_IMAGE, "")):
                return ""
            return "its image is not the one it was signed with (labels replayed?)"
        v1 = self._signature(b"owner-v1", c.name, labels, _V1_LABELS)
        if hmac.compare_digest(given, v1):
            if c.created < int(self.v1_until):
                return ""
            return "an older healerd's signature (without the image) on a newer container"
        return "signature does not verify (labels copied, made up, or the container renamed)"

    def trusts(self, c: ObservedContainer) -> bool:
        """Signed with this key, or created before it existed (the engine reports
        creation in whole seconds: a container of the key's own second must verify)."""
        return self.verifies(c) or c.created < int(self.born)

    def name_tag(self, spec_hash: str) -> str:
        return self._mac(b"name-v1", spec_hash.encode())[:NAME_HASH_LEN]


@dataclass(frozen=True)
class Unverified:
    """A container with healerd's labels that healerd did not make (as far as it can
    tell): reported, never touched."""

    id: str
    name: str
    service: str
    first_seen: float
    why: str


class Signer:
    """The engine's owner (healerd.engine.api.Owner): a list shows only the containers
    healerd can prove are its own, and each container it creates is signed. Nothing
    else of the engine is touched."""

    def __init__(
        self,
        key: HostKey,
        clock: Callable[[], float],
        on_unverified: Callable[[Unverified], None] = lambda u: None,
    ) -> None:
        self.key = key
        self._clock = clock
        self._on_unverified = on_unverified
        self._lock = threading.Lock()
        self._unverified: dict[str, Unverified] = {}

    def unverified(self) -> list[Unverified]:
        """Those the last list found (by service, then name)."""
        with self._lock:
            return sorted(self._unverified.values(), key=lambda u: (u.service, u.name))

    def mine(self, listed: list[ObservedContainer], service: str | None) -> list[ObservedContainer]:
        """`service`: a list of that service's containers only, so only its unverified
        ones are looked at again."""
        verdicts = [(c, self.key.trusts(c)) for c in listed]  # one HMAC each
        mine = [c for c, ok in verdicts if ok]
        others = [c for c, ok in verdicts if not ok]
        copies = _copies(mine)
        if copies:
            others += [c for c in mine if c.id in copies]
            mine = [c for c in mine if c.id not in copies]
        new: list[Unverified] = []
        with self._lock:
            before = self._unverified
            self._unverified = (
                {} if service is None else {i: u for i, u in before.items() if u.service != service}
            )
            for c in others:
                u = before.get(c.id)
                if u is None:
                    why = self.key.why_not(c) or "unverified"
                    if c.id in copies:
                        why = f"a copy of {aside_of(c)} (renamed as if a replacement's)"
                    if why == "no signature":
                        why = "no signature, created after the host key"
                    u = Unverified(c.id, c.name, c.service, self._clock(), why)
                    new.append(u)
                self._unverified[c.id] = u
        for u in new:
            self._on_unverified(u)
        return mine

    def labels(self, spec: ServiceSpec, name: str, given: Mapping[str, str]) -> dict[str, str]:
        # The adapter adds service and spec hash unless given; the caller's labels win.
        # Every signed label is set, so that an image's labels cannot stand in for one.
        # (The signature covers the name: a container renamed no longer verifies; the
        # executor renames only a container it removes next, or renames back.)
        owned = {k: "" for k in SIGNED_LABELS}
        owned |= {LABEL_SERVICE: spec.name, LABEL_SPEC_HASH: spec.spec_hash}
        owned |= {LABEL_IMAGE: spec.image, **given}
        return {**owned, LABEL_SIGNATURE: self.key.sign(name, owned)}


def sign(
    engine: Engine,
    key: HostKey,
    clock: Callable[[], float],
    on_unverified: Callable[[Unverified], None] = lambda u: None,
) -> Signer:
    """Make `engine` list and create as healerd's signed containers only."""
    signer = Signer(key, clock, on_unverified)
    engine.owner = signer
    return signer
