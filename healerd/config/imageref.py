"""Docker image references, checked with the engine's own grammar (distribution/reference).

    reference := name [ ":" tag ] [ "@" digest ]
    name      := [ domain "/" ] path-component [ "/" path-component ]*
    domain    := host [ ":" port ]            (a first component with ".", ":" or
                                               uppercase, or "localhost")
    path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest    := "sha256:" 64 lowercase hex digits

Catching a bad reference here turns a pull or create error that would repeat forever
(with backoff) into one clear line in the config check.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 255
_PATH_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")


def _tag_problem(tag: str) -> str | None:
    if not tag:
        return "has an empty tag after ':'"
    if _TAG_RE.fullmatch(tag):
        return None
    if len(tag) > 128:
        return f"tag is {len(tag)} characters long (at most 128)"
    return f"tag {tag!r} must be letters, digits, '_', '.' or '-' (not starting with '.' or '-')"


def _path_problem(path: str) -> str | None:
    for component in path.split("/"):
        if _PATH_COMPONENT_RE.fullmatch(component):
            continue
        if not component:
            return "has an empty path component (a doubled or trailing '/')"
        if _PATH_COMPONENT_RE.fullmatch(component.lower()):
            return f"repository name {path!r} must be lowercase"
        return (
            f"path component {component!r} must be lowercase letters and digits, "
            "separated by '.', '_', '__' or '-'"
        )
    return None


def _name_problem(name: str) -> str | None:
    """The repository name: an optional registry, then the path."""
    if not name:
        return "has no repository name"
    if len(name) > MAX_NAME_LENGTH:
        return f"repository name is longer than {MAX_NAME_LENGTH} characters"
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _DOMAIN_RE.fullmatch(first):
            return f"registry {first!r} is not a host name or host:port"
        return _path_problem(rest)
    return _path_problem(name)


def image_reference_problem(image: str) -> str | None:
    """Why `image` is not a reference Docker accepts, or None when it is fine."""
    if not image:
        return "must not be empty"
    if any(c.isspace() for c in image):
        return "must not contain whitespace"
    name, at, digest = image.partition("@")
    if at and not _DIGEST_RE.fullmatch(digest):
        return f"digest {digest!r} must be sha256: followed by 64 lowercase hex digits"
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if problem := _tag_problem(tag):
            return problem
    return _name_problem(name)


# The same grammar as one regular expression (ECMAScript-compatible, for the JSON Schema).
# Unlike image_reference_problem it does not limit the name's length.
_PATH_PART = _PATH_COMPONENT_RE.pattern
IMAGE_REFERENCE_PATTERN = (
    rf"^(?:{_DOMAIN_RE.pattern}/)?{_PATH_PART}(?:/{_PATH_PART})*"
    rf"(?::{_TAG_RE.pattern})?(?:@{_DIGEST_RE.pattern})?$"
)
