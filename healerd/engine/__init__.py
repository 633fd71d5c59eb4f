"""The container engine as the core sees it: its roles, values and errors
(healerd.engine.api), the request budget (healerd.engine.pacing), and the Docker
adapter (healerd.engine.docker, the one package that imports the docker SDK)."""

from __future__ import annotations

from healerd.engine.api import (
    CannotRestart,
    ContainerRuntime,
    Death,
    Engine,
    EngineError,
    EngineInfo,
    EngineUnavailable,
    EventSource,
    HookRun,
    ImageArchive,
    ImageBuildFailed,
    ImageMissing,
    ImagePullFailed,
    ImageStore,
    Inherited,
    Labelled,
    LocalImage,
    LogStream,
    NameConflict,
    Owner,
    ProjectResources,
    Registry,
    RestartHandOff,
    Unsupported,
)

__all__ = [
    "CannotRestart",
    "ContainerRuntime",
    "Death",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineUnavailable",
    "EventSource",
    "HookRun",
    "ImageArchive",
    "ImageBuildFailed",
    "ImageMissing",
    "ImagePullFailed",
    "ImageStore",
    "Inherited",
    "Labelled",
    "LocalImage",
    "LogStream",
    "NameConflict",
    "Owner",
    "ProjectResources",
    "Registry",
    "RestartHandOff",
    "Unsupported",
]
