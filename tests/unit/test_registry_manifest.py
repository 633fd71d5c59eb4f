"""An image's digest asked of the registry itself (engine/docker/manifest.py), for
Podman, which has no /distribution endpoint: against a tiny registry on 127.0.0.1 that
plays the v2 API's Bearer token flow and basic auth (issue 31)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from healerd.engine.api import ImagePullFailed
from healerd.engine.docker.manifest import ACCEPT, locate, registry_digest

BODY = json.dumps({"schemaVersion": 2, "manifests": []}).encode()
DIGEST = "sha256:" + hashlib.sha256(BODY).hexdigest()
BASIC = "Basic " + base64.b64encode(b"ann:secret").decode()


class Registry:
    """`mode`: "bearer" (a token service at /token that wants ann:secret) or "basic"
    (no Docker-Content-Digest header: the digest is the body's)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen: list[tuple[str, str, str | None, str]] = []  # method, path, Accept, auth
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                self._manifest(body=False)

            def do_GET(self) -> None:
                if self.path.startswith("/token"):
                    ok = self.headers.get("Authorization") == BASIC
                    self._send(200 if ok else 401, json.dumps({"token": "t0k"}).encode())
                else:
                    self._manifest(body=True)

            def _manifest(self, body: bool) -> None:
                given = self.headers.get("Authorization", "")
                registry.seen.append((self.command, self.path, self.headers.get("Accept"), given))
                if registry.mode == "bearer" and given != "Bearer t0k":
                    realm = f"http://{registry.host}/token"
                    challenge = (
                        f'Bearer realm="{realm}",service="reg",scope="repository:team/app:pull"'
                    )
                    self._send(401, b"", {"WWW-Authenticate": challenge})
                elif registry.mode == "basic" and given != BASIC:
                    self._send(401, b"", {"WWW-Authenticate": 'Basic realm="reg"'})
                elif not self.path.endswith("/manifests/1"):
                    self._send(404, b"")
                else:
                    extra = {"Docker-Content-Digest": DIGEST} if registry.mode == "bearer" else {}
                    self._send(200, BODY if body else b"", extra, length=len(BODY))

            def _send(
                self,
                code: int,
                body: bytes,
                headers: dict[str, str] | None = None,
                length: int | None = None,
            ) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(params=["bearer", "basic"])
def registry(request: pytest.FixtureRequest) -> Iterator[Registry]:
    r = Registry(request.param)
    yield r
    r.server.shutdown()
    r.server.server_close()


def test_references_are_located_as_the_v2_api_names_them() -> None:
    assert locate("nginx") == ("registry-1.docker.io", "library/nginx", "latest")
    assert locate("docker.io/grafana/grafana:11") == (
        "registry-1.docker.io",
        "grafana/grafana",
        "11",
    )
    assert locate("ghcr.io/org/app:2") == ("ghcr.io", "org/app", "2")
    assert locate("localhost:5000/x@sha256:ab") == ("localhost:5000", "x", "sha256:ab")


def test_the_digest_comes_with_the_credentials_and_asks_for_lists(registry: Registry) -> None:
    auth = {"username": "ann", "password": "secret", "serveraddress": registry.host}
    assert registry_digest(f"{registry.host}/team/app:1", auth, timeout=5) == DIGEST
    _, path, accept, _ = registry.seen[0]
    assert path == "/v2/team/app/manifests/1" and accept == ACCEPT
    assert "manifest.list.v2+json" in ACCEPT and "image.index.v1+json" in ACCEPT


def test_wrong_or_no_credentials_and_a_missing_tag_are_said(registry: Registry) -> None:
    wrong = {"username": "ann", "password": "nope", "serveraddress": registry.host}
    with pytest.raises(ImagePullFailed, match=r"check .*app:1: the registry refused"):
        registry_digest(f"{registry.host}/team/app:1", wrong, timeout=5)
    with pytest.raises(ImagePullFailed, match="refused the credentials"):
        registry_digest(f"{registry.host}/team/app:1", {}, timeout=5)
    right = {"username": "ann", "password": "secret"}
    with pytest.raises(ImagePullFailed, match="no such manifest"):
        registry_digest(f"{registry.host}/team/app:2", right, timeout=5)


def test_a_registry_away_is_said() -> None:
    with pytest.raises(ImagePullFailed, match="cannot be reached"):
        registry_digest("127.0.0.1:9/team/app:1", {}, timeout=2)
