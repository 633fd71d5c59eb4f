"""The labels that make a container healerd's, and how much of the spec hash they show.

Signed with the host key (healerd.core.signing): a label outside SIGNED_LABELS is no
proof of anything.
"""

LABEL_SERVICE = "io.healerd.service"
LABEL_SPEC_HASH = "io.healerd.spec-hash"
# Replacements in this replica's line so far, and how many of them came in quick succession
# (the crash-loop backoff streak): labels, so that a restarted healerd knows them too.
LABEL_RESTARTS = "io.healerd.restarts"
LABEL_CRASH_STREAK = "io.healerd.crash-streak"
# The file that declared the container's service: after a restart, a service declared in
# two files keeps the declaration that was applied. Not part of the hash.
LABEL_SOURCE_FILE = "io.healerd.source-file"
# On a replacement: the id of the failed container it replaced. A stopped container that
# another container of its service names here is history: kept for its logs and exit
# code (`healerctl logs --previous`, `describe`), never counted as a replica.
LABEL_REPLACES = "io.healerd.replaces"
# The image reference the container was created from, as the spec named it: signed, so
# that a container of another image cannot wear a removed container's labels.
LABEL_IMAGE = "io.healerd.image"
# An HMAC with the host key over the container's name and its other io.healerd.* labels:
# what makes a container healerd's (healerd.core.signing).
LABEL_SIGNATURE = "io.healerd.signature"
OWNER_LABEL_PREFIX = "io.healerd."
SIGNED_LABELS = (
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    LABEL_RESTARTS,
    LABEL_CRASH_STREAK,
    LABEL_SOURCE_FILE,
    LABEL_REPLACES,
    LABEL_IMAGE,
)

# How many hex digits of the spec hash the label carries, and how many the name shows.
SPEC_HASH_LEN = 16
NAME_HASH_LEN = 5


def aside_name(name: str, container_id: str) -> str:
    """The name a container_name replacement gives the container it replaces while the
    new one takes `name` (healerd.core.executor; signing.aside_of reads it back)."""
    return f"{name}{ASIDE}{container_id[:12]}"


ASIDE = "-replaced-"
