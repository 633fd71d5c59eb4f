"""A real image registry for the tests: Debian's `docker-registry` (distribution 2.x).

`Registry` runs `docker-registry serve CONFIG` on 127.0.0.1, on a free port, with its
config, its storage (filesystem driver) and, when asked, an htpasswd file (bcrypt,
`htpasswd -Bbn`) all in one temporary directory; `start` waits for `/v2/` to answer with
a deadline and `stop` ends it and deletes the directory. `push` tags a local image as
`127.0.0.1:PORT/REPO:TAG`, pushes it with the docker SDK and removes the local tag, so
that healerd has to pull it.

Engines treat registries on 127.0.0.0/8 as insecure (plain http) without any flag
(dockerd's default `insecure-registries` is 127.0.0.0/8): test_registry.py checks it on
the private dockerd. Installed by tests/support/engine.sh (`docker-registry` and
`apache2-utils`).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import docker

from tests.support.polling import wait_for
from tests.support.processes import terminate

BINARY = "docker-registry"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def htpasswd_line(user: str, password: str) -> str:
    """`user:$2y$...` (bcrypt), from `htpasswd -Bbn`: the only hash distribution reads."""
    out = subprocess.run(
        ["htpasswd", "-Bbn", user, password], capture_output=True, text=True, check=True
    ).stdout
    return out.strip() + "\n"


def auth_json(host: str, user: str, password: str, *, split: bool = False) -> str:
    """A Docker config.json with one `auths` entry for `host`: `auth` (base64
    user:password) by default, `username` and `password` with `split`."""
    if split:
        entry = {"username": user, "password": password}
    else:
        entry = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
    return json.dumps({"auths": {host: entry}}, indent=2) + "\n"


MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)


class Registry:
    """One registry process on 127.0.0.1:`port`; with `user`, htpasswd basic auth."""

    def __init__(self, *, user: str | None = None, password: str | None = None) -> None:
        self.user = user
        self.password = password
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.host}/{repo}:{tag}"

    def _config(self, root: Path) -> str:
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {root / 'data'}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
        ]
        if self.user is not None:
            (root / "htpasswd").write_text(htpasswd_line(self.user, self.password or ""))
            lines += [
                "auth:",
                "  htpasswd:",
                "    realm: healerd-test",
                f"    path: {root / 'htpasswd'}",
            ]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 30.0) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(f"{BINARY} not installed: run tests/support/engine.sh")
        self.dir = Path(tempfile.mkdtemp(prefix="healerd-registry-"))
        self.port = free_port()
        config = self.dir / "config.yml"
        config.write_text(self._config(self.dir))
        with open(self.dir / "registry.log", "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "serve", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_for(f"registry on {self.host} to answer /v2/", self._answers, timeout, 0.05)

    def _answers(self) -> bool:
        assert self.proc is not None and self.dir is not None
        if self.proc.poll() is not None:
            log = (self.dir / "registry.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{BINARY} exited: {log}")
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as r:
                return int(r.status) == 200
        except urllib.error.HTTPError as exc:
            return exc.code == 401 and self.user is not None  # auth on: it answers
        except OSError:
            return False

    def log(self) -> str:
        if self.dir is None:
            return ""
        return (self.dir / "registry.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 10)
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def digest(self, repo: str, tag: str) -> str:
        """The digest this registry gives REPO:TAG (its Docker-Content-Digest for the
        manifest, as a pull by tag records it): asked of the registry itself, since
        Podman has no /distribution endpoint."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{tag}",
            method="HEAD",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        if self.user is not None:
            pair = f"{self.user}:{self.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.headers["Docker-Content-Digest"])

    def push(self, api: docker.APIClient, image: str, repo: str, tag: str) -> str:
        """Push local `image` as REPO:TAG here, then drop the local tag; returns the ref."""
        ref = self.ref(repo, tag)
        api.tag(image, f"{self.host}/{repo}", tag=tag)
        auth = None
        if self.user is not None:
            auth = {"username": self.user, "password": self.password or ""}
        try:
            out = api.push(
                f"{self.host}/{repo}", tag=tag, auth_config=auth, stream=True, decode=True
            )
            errors = [line["error"] for line in out if isinstance(line, dict) and "error" in line]
            if errors:
                raise RuntimeError(f"push {ref}: {errors[-1]}")
        finally:
            api.remove_image(ref)
        return ref
