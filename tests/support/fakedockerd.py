"""A tiny HTTP server on a unix socket that plays an engine's version handshake (issue
31): /version with the API versions it is given, /_ping, an empty container list and an
event stream that ends at once at any API version; every other request a 404 (GET) or
500 (POST). Records the paths asked."""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path


class FakeDockerd:
    """Answers /version with `api` and `low` (MinAPIVersion), /_ping, and an empty
    container list at any API version; records every path asked."""

    def __init__(self, path: Path, api: str, low: str = "1.12", component: str = "Engine") -> None:
        # `component`: the first of /version's Components ("Podman Engine" on Podman).
        self.path, self.api, self.low, self.component = path, api, low, component
        self.asked: list[str] = []
        self._server: socketserver.UnixStreamServer | None = None

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                fake.asked.append(self.path)
                if self.path == "/version":
                    body = {
                        "Version": "fake",
                        "ApiVersion": fake.api,
                        "MinAPIVersion": fake.low,
                        "Components": [{"Name": fake.component, "Version": "fake"}],
                    }
                    self._answer(json.dumps(body).encode())
                elif self.path == "/_ping":
                    self._answer(b"OK")
                elif "/containers/json" in self.path:
                    self._answer(b"[]")
                elif "/events" in self.path:
                    self._answer(b"")  # a stream that ends at once: an engine stopping
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                fake.asked.append(self.path)
                self.send_error(500)

            def _answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.path.unlink(missing_ok=True)
        self._server = Server(str(self.path), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.path.unlink(missing_ok=True)
