"""healerd.yaml's `updates:` applied to the services that do not say (kept apart from
healerd.config.updatekeys: the service parser imports that one, and this one reads the
whole desired state)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from healerd.config.desired import DesiredState
from healerd.config.updatekeys import UpdateDefaults, with_defaults


def update_defaults(state: DesiredState, defaults: UpdateDefaults) -> DesiredState:
    """Every service with healerd.yaml's `updates:` defaults where it says nothing."""
    if defaults == UpdateDefaults():
        return state
    services = {name: with_defaults(spec, defaults) for name, spec in state.services.items()}
    return replace(state, services=MappingProxyType(services))


__all__ = ["update_defaults"]
