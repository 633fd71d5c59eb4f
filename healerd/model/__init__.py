"""Plain data shared by every layer: desired specs, observed containers, actions.

Nothing here does I/O, so the planner and the tests can build these freely. Import the
names from `healerd.model`; the modules hold them by job:

| module | holds |
|---|---|
| `labels.py` | the io.healerd.* labels, the signed ones, the spec hash's lengths |
| `build.py` | a service's `build:` and the label of the context hash it was built from |
| `parts.py` | the parts of a spec and a project (ports, mounts, networks, pacing, ...) |
| `spec.py` | `ServiceSpec` and its spec hash (`STEERING` fields stay out of it) |
| `nodeconf.py` | what healerd.yaml says of the node: floors, engine budget, TLS, registry auth |
| `observed.py` | what the engine reports: containers, their health, events |
| `actions.py` | the planner's steps for the executor |
"""

from healerd.model.actions import Action, ActionKind
from healerd.model.build import LABEL_CONTEXT_HASH, BuildSpec
from healerd.model.labels import (
    ASIDE,
    LABEL_CRASH_STREAK,
    LABEL_IMAGE,
    LABEL_REPLACES,
    LABEL_RESTARTS,
    LABEL_SERVICE,
    LABEL_SIGNATURE,
    LABEL_SOURCE_FILE,
    LABEL_SPEC_HASH,
    NAME_HASH_LEN,
    OWNER_LABEL_PREFIX,
    SIGNED_LABELS,
    SPEC_HASH_LEN,
    aside_name,
)
from healerd.model.nodeconf import DockerTLS, NodeLimits, RegistryAuth, Threshold
from healerd.model.observed import (
    ContainerState,
    EngineAction,
    EngineEvent,
    Health,
    ObservedContainer,
)
from healerd.model.parts import (
    HOOK_TIMEOUT,
    PRE_STOP_FLOOR,
    VOLUME_DEFAULTS,
    Dependency,
    DeviceRequest,
    HealthcheckSpec,
    Hook,
    IpamPool,
    LoggingSpec,
    NetworkDecl,
    NetworkEndpoint,
    PortSpec,
    PullPolicy,
    RestartPolicy,
    SecretMount,
    Substitution,
    Ulimit,
    UpdateConfig,
    UpdateOrder,
    VolumeDecl,
    VolumeSpec,
)
from healerd.model.spec import STEERING, ServiceSpec, steering

__all__ = [
    "ASIDE",
    "HOOK_TIMEOUT",
    "LABEL_CONTEXT_HASH",
    "LABEL_CRASH_STREAK",
    "LABEL_IMAGE",
    "LABEL_REPLACES",
    "LABEL_RESTARTS",
    "LABEL_SERVICE",
    "LABEL_SIGNATURE",
    "LABEL_SOURCE_FILE",
    "LABEL_SPEC_HASH",
    "NAME_HASH_LEN",
    "OWNER_LABEL_PREFIX",
    "PRE_STOP_FLOOR",
    "SIGNED_LABELS",
    "SPEC_HASH_LEN",
    "STEERING",
    "VOLUME_DEFAULTS",
    "Action",
    "ActionKind",
    "BuildSpec",
    "ContainerState",
    "Dependency",
    "DeviceRequest",
    "DockerTLS",
    "EngineAction",
    "EngineEvent",
    "Health",
    "HealthcheckSpec",
    "Hook",
    "IpamPool",
    "LoggingSpec",
    "NetworkDecl",
    "NetworkEndpoint",
    "NodeLimits",
    "ObservedContainer",
    "PortSpec",
    "PullPolicy",
    "RegistryAuth",
    "RestartPolicy",
    "SecretMount",
    "ServiceSpec",
    "Substitution",
    "Threshold",
    "Ulimit",
    "UpdateConfig",
    "UpdateOrder",
    "VolumeDecl",
    "VolumeSpec",
    "aside_name",
    "steering",
]
