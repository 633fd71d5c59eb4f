"""`${NAME}` in place of a value that came from a variable, wherever healerd shows a spec.

A service file's `${VAR}`s often carry secrets from a 0600 `.env` into `command` or a
healthcheck (`redis-server --requirepass ${REDIS_PASSWORD}`). The container needs the
value; a reader of `describe`, `status` or an export does not. Each Substitution the
interpolation made (healerd.config.interpolate) is masked by its value, wherever it
stands, rather than by its place in the file: a value survives splitting (a command
string becomes argv), quoting (an error's repr) and a trip through the engine (a pull
error naming the image), and its place does not.

The price: a short value masks every occurrence of itself in what is shown of the
service (`${W}` for each 4 when W=4 is in its command). Environment and label values
are never shown, and numbers stay numbers, so theirs mask nothing. What is written to be
deployed again (healerctl export) cannot pay it: there a value goes back only into the
field it came from (`related`, healerd.cli.export.variables).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from healerd.config.envfile import EnvFileError, effective_environment
from healerd.model import ServiceSpec, Substitution

_Subs = tuple[Substitution, ...]


def shown(spec: ServiceSpec | None) -> _Subs:
    """What views of `spec` mask: its substitutions into fields that can be shown."""
    return tuple(s for s in spec.substitutions if s.shown) if spec is not None else ()


def _spellings(value: str) -> set[str]:
    """The value as written, as Python's repr and as JSON write its inside."""
    return {value, repr(value)[1:-1], json.dumps(value)[1:-1]}


@functools.lru_cache(maxsize=256)
def _pattern(subs: _Subs, quoted: bool) -> tuple[re.Pattern[str], dict[str, str]] | None:
    """One pattern for every value (longest first, so one inside another loses), and
    what each spelling is replaced with. `quoted`: a quoted whole value reads as "the
    value of ${NAME} (not shown)", for messages that quote what they refuse."""
    table: dict[str, str] = {}
    for s in subs:
        if not s.value:
            continue
        if quoted:
            for q in ("'", '"'):
                table.setdefault(f"{q}{s.value}{q}", f"the value of ${{{s.name}}} (not shown)")
            table.setdefault(repr(s.value), f"the value of ${{{s.name}}} (not shown)")
        for text in _spellings(s.value):
            table.setdefault(text, f"${{{s.name}}}")
    if not table:
        return None
    alternatives = sorted(table, key=len, reverse=True)
    return re.compile("|".join(re.escape(a) for a in alternatives)), table


# In free text (a status reason, an event), values shorter than this stay: a value that
# short is no secret worth the name, and masking it would garble the hex tags in every
# container name the text holds.
FREE_TEXT_MIN = 4


def mask(text: str, subs: Iterable[Substitution], min_length: int = 1) -> str:
    """`text` with each value of `subs` (at least `min_length` long) as `${NAME}`, in
    one pass: a mask is never masked again."""
    found = _pattern(tuple(s for s in subs if len(s.value) >= min_length), False)
    return text if found is None else found[0].sub(lambda m: found[1][m.group(0)], text)


def mask_free(text: str, subs: Iterable[Substitution]) -> str:
    """Free text about a service: `mask` with values of FREE_TEXT_MIN or more."""
    return mask(text, subs, FREE_TEXT_MIN)


def mask_error(reason: str, subs: Iterable[Substitution]) -> str:
    """A config error's reason: a quoted value reads "the value of ${NAME} (not shown)"."""
    found = _pattern(tuple(subs), True)
    return reason if found is None else found[0].sub(lambda m: found[1][m.group(0)], reason)


def write_back(text: str, subs: Iterable[Substitution]) -> str:
    """A value for a Compose file: `${NAME}` for each value of `subs`, `$$` for every
    other `$` (docker compose and docker stack deploy interpolate what they read)."""
    return refer(text, subs, lambda name: f"${{{name}}}", lambda s: s.replace("$", "$$"))


def refer(
    text: str,
    subs: Iterable[Substitution],
    ref: Callable[[str], str],
    literal: Callable[[str], str] = lambda s: s,
) -> str:
    """`text` with each value of `subs` as `ref(NAME)` and the text between through
    `literal` (an escape for the target's own references)."""
    found = _pattern(tuple(subs), False)
    if found is None:
        return literal(text)
    names = {spelling: masked[2:-1] for spelling, masked in found[1].items()}
    out, at = [], 0
    for m in found[0].finditer(text):
        out += [literal(text[at : m.start()]), ref(names[m.group(0)])]
        at = m.end()
    out.append(literal(text[at:]))
    return "".join(out)


def mask_tree(value: Any, subs: Iterable[Substitution]) -> Any:
    """Every string in a JSON-like tree (values, not keys) through `mask`."""
    return map_strings(value, functools.partial(mask, subs=tuple(subs)))


def map_strings(value: Any, f: Callable[[str], str]) -> Any:
    """`value` with `f` applied to every string that is not a mapping's key."""
    if isinstance(value, str):
        return f(value)
    if isinstance(value, dict):
        return {k: map_strings(v, f) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(v, f) for v in value]
    return value


def related(a: str, b: str) -> bool:
    """One field is the other or holds it (`ports` and `ports[0]`, `healthcheck.test`)."""
    short, long = sorted((a, b), key=len)
    return long == short or long.startswith((f"{short}.", f"{short}["))


def holds(text: str, subs: Iterable[Substitution]) -> list[str]:
    """The names of `subs` whose value is in `text`."""
    return list(dict.fromkeys(s.name for s in subs if s.value and s.value in text))


# Environment values shorter than this, and numbers, stay in output that is shown: they
# would mask half of any line.
ENV_MASK_MIN = 4


def mask_environment(
    line: str, spec: ServiceSpec | None, extra: Iterable[tuple[str, str]] = ()
) -> str:
    """`line` (a container's or a hook's output) with each of the service's environment
    values (env files' too), and `extra`'s (a hook's own), as `[NAME]`: output often
    echoes them (a connection string in an error). Values of fewer than ENV_MASK_MIN
    characters and numbers are left."""
    env: list[tuple[str, str]] = list(extra)
    if spec is not None:
        try:
            env += effective_environment(spec)
        except (EnvFileError, OSError):
            env += spec.environment
    for name, value in sorted(env, key=lambda kv: len(kv[1]), reverse=True):
        if len(value) >= ENV_MASK_MIN and not value.replace(".", "").isdigit() and value in line:
            line = line.replace(value, f"[{name}]")
    return line


__all__ = [
    "ENV_MASK_MIN",
    "FREE_TEXT_MIN",
    "holds",
    "map_strings",
    "mask",
    "mask_environment",
    "mask_error",
    "mask_free",
    "mask_tree",
    "refer",
    "related",
    "shown",
    "write_back",
]
