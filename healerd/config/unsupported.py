"""The Compose specification's service fields that healerd does not take, each with why
(issue 16: an error naming the field and the reason, never a silent drop). Fields that
mean nothing on one Linux engine say so; the others are not supported yet."""

from __future__ import annotations

from healerd.config.legacy import FORMAT_ONE_KEYS

_NOT_YET = "not supported yet by healerd"
_WINDOWS = "only means something for Windows containers; this engine runs Linux ones"

UNSUPPORTED: dict[str, str] = {
    "annotations": f"{_NOT_YET} (container annotations need Docker 24's API)",
    "attach": "healerd attaches to no container's output (healerctl logs shows it): remove it",
    "blkio_config": f"{_NOT_YET} (block I/O weights and limits)",
    "cgroup": f"{_NOT_YET} (the cgroup namespace: the engine's default applies)",
    "cpu_count": _WINDOWS,
    "cpu_percent": _WINDOWS,
    "credential_spec": _WINDOWS,
    "develop": "Compose's watch mode belongs to `docker compose watch` while developing; "
    "healerd runs built images: remove it",
    "external_links": "links to containers outside the project are legacy: join a shared "
    "external network instead",
    "isolation": _WINDOWS,
    "label_file": f"{_NOT_YET}: write the labels under labels",
    "models": "AI models are served by Docker Model Runner, not by a container healerd runs",
    "provider": "provider services are run by a Compose plugin, not as containers",
    "pull_refresh_after": f"{_NOT_YET}: see pull_policy",
    "use_api_socket": "healerd gives no container its engine's socket by itself: bind "
    "/var/run/docker.sock in volumes if the service needs it",
    "volumes_from": "the containers of a service change with every heal: share a named "
    "volume between the services instead",
}

# Format 1's keys beside services: (healerd.config.legacy): refused, naming today's key.
UNSUPPORTED.update(FORMAT_ONE_KEYS)
