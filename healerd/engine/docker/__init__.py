"""The Docker adapter: the only package that imports the docker SDK. `DockerEngine`
(engine.py) implements every role of healerd.engine.api on one client (client.py); the
private SDK touches it needs are in sdk.py alone."""

from __future__ import annotations

from healerd.engine.docker.engine import DockerEngine

__all__ = ["DockerEngine"]
