"""Lifecycle hooks run in a container (ContainerRuntime.exec_hook): an exec made, started
with its output streamed back, and inspected for its exit code, as `docker compose` runs
post_start and pre_stop.

The bound: the exec's start is read with the socket's timeout set, before each read,
to what is left of the hook's time, so that no read outlives it; when the time is up
the response is closed (its connection dropped) and the exec is left to run: the engine
has no call that ends one (for a pre_stop, the stop that follows does). No thread is
started, so none can be left blocked.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import urllib3

from healerd.engine.api import HOOK_TAIL_BYTES, HookRun
from healerd.engine.docker import sdk
from healerd.engine.docker.client import DockerClient
from healerd.model import Hook

# A multiplexed frame's header: stream (1 byte), 3 bytes of padding, length (big endian).
_HEADER = struct.Struct(">BxxxL")
_CHUNK = 16 * 1024
# The last lines of output kept, as docker compose keeps them for its error.
TAIL_LINES = 10
# After the output ends, how long the exec may still say it runs (its exit is recorded
# just after its streams close), and how often it is asked meanwhile.
_EXIT_WAIT = 1.0
_EXIT_POLL = 0.01
_TIMEOUTS = (socket.timeout, urllib3.exceptions.ReadTimeoutError)


class _TimeUp(Exception):
    """The hook's time passed while its output was read."""


class Tail:
    """The last HOOK_TAIL_BYTES of what was written, then its last TAIL_LINES lines."""

    def __init__(self, size: int = HOOK_TAIL_BYTES) -> None:
        self._size = size
        self._data = bytearray()

    def add(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > self._size:
            del self._data[: len(self._data) - self._size]

    def text(self) -> str:
        lines = self._data.decode("utf-8", "replace").splitlines()
        kept = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines]
        return "\n".join(line for line in kept if line.strip())[-self._size :].strip()


class _Reader:
    """A streamed response read to a deadline (monotonic): each read's socket timeout
    is the time left (`sock` None: the request's own timeout bounds each read)."""

    def __init__(self, response: Any, deadline: float) -> None:
        self._raw = response.raw
        self._sock = sdk.stream_socket(response)
        self._deadline = deadline

    def exactly(self, size: int) -> bytes:
        out = b""
        while len(out) < size:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise _TimeUp
            if self._sock is not None:
                self._sock.settimeout(left)
            try:
                data = self._raw.read(size - len(out))
            except _TIMEOUTS:
                raise _TimeUp from None
            if not data:
                break
            out += data
        return out

    def frames(self, tail: Tail) -> None:
        """Every frame's payload into `tail` until the output ends (_TimeUp at the
        deadline)."""
        while True:
            header = self.exactly(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            _, length = _HEADER.unpack(header)
            while length > 0:
                data = self.exactly(min(length, _CHUNK))
                if not data:
                    return
                length -= len(data)
                tail.add(data)


class DockerHooks:
    _client: DockerClient

    def exec_hook(self, container_id: str, hook: Hook, timeout: float) -> HookRun:
        deadline = time.monotonic() + max(0.0, timeout)
        what = f"exec in {container_id[:12]}"
        env = [f"{name}={value}" for name, value in hook.environment]
        with self._client.call(what):
            made = self._client.api.exec_create(
                container_id,
                list(hook.command),
                stdout=True,
                stderr=True,
                tty=False,
                privileged=hook.privileged,
                user=hook.user or "",
                environment=env or None,
                workdir=hook.working_dir,
            )
        exec_id = str(made["Id"])
        tail = Tail()
        # Without an Upgrade header the engine answers 200 and the output is the body,
        # read until the engine closes it (Docker and Podman alike).
        start = {"Detach": False, "Tty": False}
        with self._client.call(what):
            response = self._client.post(
                "/exec/{0}/start", exec_id, json=start, stream=True, timeout=max(0.1, timeout)
            )
        try:
            with self._client.call(what):
                _Reader(response, deadline).frames(tail)
        except _TimeUp:
            return HookRun(None, tail.text())
        finally:
            response.close()
        return HookRun(self._exit_code(exec_id, what, deadline), tail.text())

    def _exit_code(self, exec_id: str, what: str, deadline: float) -> int | None:
        """The exec's exit code once the engine has it (None: still running at the
        deadline)."""
        end = min(deadline, time.monotonic() + _EXIT_WAIT)
        while True:
            with self._client.call(what):
                state = self._client.api.exec_inspect(exec_id)
            code = state.get("ExitCode")
            if not state.get("Running") and code is not None:
                return int(code)
            if time.monotonic() >= end:
                return None
            time.sleep(_EXIT_POLL)


__all__ = ["DockerHooks", "Tail"]
