"""Reaching a service by name from inside a container of the test image.

Debian's busybox-static wget (and its name lookups) segfault in a container on a
user-defined network, even on an address (static glibc cannot load its NSS modules), so
the name is resolved with busybox's own nslookup (which asks 127.0.0.11, the engine's
DNS) and the page is fetched with nc."""

from __future__ import annotations

import docker


def run_in(api: docker.APIClient, container: str, *cmd: str) -> str:
    """The command's output, or "" if it failed."""
    exec_id = api.exec_create(container, list(cmd))["Id"]
    output = api.exec_start(exec_id).decode(errors="replace")
    return output if api.exec_inspect(exec_id)["ExitCode"] == 0 else ""


def fetch_by_name(
    api: docker.APIClient, container: str, name: str, port: int, server: str | None = None
) -> str:
    """Resolve `name` from `container` (asking `server`, else the first nameserver) and
    fetch / from each address ("" if any fails)."""
    answer = run_in(api, container, "busybox", "nslookup", name, *([server] if server else []))
    # The answer's addresses, after its "Name:" line: not the server's own (127.0.0.11 on
    # Docker, the network's gateway on Podman); Podman's aardvark-dns 1.4 answers the
    # AAAA question with the A record too, so each address once.
    _, _, answers = answer.partition("Name:")
    found = [line.split()[-1] for line in answers.splitlines() if line.startswith("Address:")]
    addresses = list(dict.fromkeys(found))
    get = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {{}} {port}"
    pages = [run_in(api, container, "sh", "-c", get.format(a)) for a in addresses]
    return "".join(pages) if pages and all(pages) else ""
