"""What `healerctl export` does with values that came from `${VAR}` (a spec's
Substitutions): they are often secrets from a 0600 `.env`, and an export is meant to be
committed or applied elsewhere.

- Compose and stack files get `${VAR}` back (and `$$` for a literal `$`): the output
  needs the same `.env` (docker compose) or environment (docker stack deploy).
- Kubernetes has no interpolation: an environment value that holds one comes from the
  service's Secret (`<service>-env`, written with --include-secrets) through a
  `secretKeyRef`; command and args refer to `$(VAR)`, a variable of the container that
  comes from the Secret too, and a shell healthcheck to `${VAR}`.
- A value in `command`, `entrypoint` or a healthcheck is a warning (an error with
  --strict): whoever can read the container's config or its process list sees it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from healerd.config.masking import holds, refer, related, write_back
from healerd.model import ServiceSpec, Substitution


def written_back(value: Any, subs: tuple[Substitution, ...], field: str = "") -> Any:
    """A Compose tree that sits at `field` (`services.web`, or "" for the top level) with
    `${NAME}` for each value of `subs` that went into the same field of the service
    file, and `$$` for every other `$`. A value is put back only where it went in, so
    `DEBUG=1` does not turn every 1 of the file into `${DEBUG}`."""
    if isinstance(value, str):
        return write_back(value, [s for s in subs if related(s.field, field)])
    if isinstance(value, dict):
        return {
            k: written_back(v, subs, f"{field}.{k}" if field else str(k)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [written_back(v, subs, f"{field}[{i}]") for i, v in enumerate(value)]
    return value


def scoped(spec: ServiceSpec, field: str) -> tuple[Substitution, ...]:
    """The substitutions made into `field` of `spec` (`environment.DB_URL`, `command`)."""
    where = f"services.{spec.name}.{field}"
    return tuple(s for s in spec.substitutions if related(s.field, where))


def all_substitutions(specs: list[ServiceSpec]) -> tuple[Substitution, ...]:
    """For what several services share (top-level secrets and configs)."""
    return tuple(dict.fromkeys(s for spec in specs for s in spec.substitutions))


def argv_warnings(spec: ServiceSpec, how: str) -> list[str]:
    """One warning per command-like field that holds a value from a variable; `how`
    says how the target writes it."""
    hc = spec.healthcheck
    out = []
    for field, argv in (
        ("entrypoint", spec.entrypoint),
        ("command", spec.command),
        ("healthcheck", hc.test if hc is not None and not hc.disable else None),
    ):
        names = holds("\0".join(argv or ()), scoped(spec, field))
        if names:
            refs = ", ".join(f"${{{n}}}" for n in names)
            out.append(
                f"{spec.name}: {field}: holds the value of {refs}, {how}; whoever can "
                "inspect the container or list its processes reads it there (pass it in "
                "the environment or a secret file instead)"
            )
    return out


def env_note(specs: list[ServiceSpec], target: str) -> str | None:
    """Where the written-back variables come from when the output is deployed."""
    names = sorted({s.name for spec in specs for s in spec.substitutions})
    if not names:
        return None
    files = sorted(
        {
            str(Path(spec.source_file).with_suffix(".env"))
            for spec in specs
            if spec.substitutions and Path(spec.source_file).with_suffix(".env").is_file()
        }
    )
    where = ", ".join(files) or "the files' .env"
    refs = ", ".join(f"${{{n}}}" for n in names)
    if target == "compose":
        how = f"docker compose reads them from a .env beside the file, or --env-file ({where})"
    else:
        how = f"docker stack deploy reads them from its environment (set -a; . {where}; set +a)"
    return f"the output refers to {refs}, as the service files do: {how}"


class KubernetesVars:
    """A service's container env, command and probe for Kubernetes, and the keys of its
    Secret that they read."""

    def __init__(self, spec: ServiceSpec, secret_name: str) -> None:
        self.spec, self.secret_name = spec, secret_name
        self.secret: dict[str, str] = {}  # key -> value, for the Secret
        self.env: list[dict[str, Any]] = []
        for name, value in spec.environment:
            if holds(value, scoped(spec, f"environment.{name}")):
                self.env.append({"name": name, "valueFrom": self._ref(name, value)})
            else:
                self.env.append({"name": name, "value": value})

    def _ref(self, key: str, value: str) -> dict[str, Any]:
        self.secret.setdefault(key, value)
        return {"secretKeyRef": {"name": self.secret_name, "key": key}}

    def _variables(self, text: str, subs: tuple[Substitution, ...]) -> None:
        """Each variable `text` refers to, as a variable of the container."""
        declared = {e["name"] for e in self.env}
        for s in subs:
            if s.value and s.value in text and s.name not in declared:
                self.env.append({"name": s.name, "valueFrom": self._ref(s.name, s.value)})
                declared.add(s.name)

    def argv(self, items: tuple[str, ...], field: str) -> list[str]:
        """`entrypoint` or `command` as command or args: `$(NAME)`, which Kubernetes
        expands from the container's variables (a literal `$(` or `$$` escaped)."""
        subs = scoped(self.spec, field)
        self._variables("\0".join(items), subs)
        return [refer(i, subs, lambda n: f"$({n})", _escape_k8s) for i in items]

    def shell(self, text: str) -> str:
        """A `sh -c` probe: `${NAME}`, which the shell expands."""
        subs = scoped(self.spec, "healthcheck")
        self._variables(text, subs)
        return refer(text, subs, lambda n: f"${{{n}}}")


def _escape_k8s(text: str) -> str:
    """Kubernetes reads `$$` as `$` and `$(X)` as a variable: both kept literal."""
    return _K8S_DOLLAR.sub("$$", text)


_K8S_DOLLAR = re.compile(r"\$(?=[$(])")


__all__ = [
    "KubernetesVars",
    "all_substitutions",
    "argv_warnings",
    "env_note",
    "scoped",
    "written_back",
]
