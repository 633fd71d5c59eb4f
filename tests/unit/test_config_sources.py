"""healerd.yaml's `sources:`: git sources checked, every error with its file, line and field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import Settings, SettingsError, check_settings, load_settings
from healerd.config.sourcekeys import GitSource, SourceVerify, masked_git_url
from tests.unit.harness.files import trusted_tmp_dir

SIGNERS = "{allowed_signers: /etc/healerd/allowed_signers}"


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "healerd.yaml"
    path.write_text(text)
    return load_settings(path)


def errors_of(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SettingsError) as info:
        load(tmp_path, text)
    for e in info.value.errors:
        assert e.file == str(tmp_path / "healerd.yaml")
    return [(e.line, e.field, e.reason) for e in info.value.errors]


def test_a_source_with_every_key(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        f"""sources:
  - git: https://git.example.net/edge/site-7.git
    ref: stable
    path: hosts/%H/
    interval: 5m
    timeout: 30s
    verify: {SIGNERS}
    credentials: /etc/healerd/git-token
  - git: ssh://git@git.example.net/edge/fleet.git
    name: fleet
    verify: {{gpg_keys: /etc/healerd/fleet.asc}}
    known_hosts: /etc/healerd/known_hosts
  - git: file:///srv/git/local.git
    verify: none
""",
    )
    one, two, three = s.sources
    assert one == GitSource(
        name="site-7",
        url="https://git.example.net/edge/site-7.git",
        ref="stable",
        path="hosts/%H/",
        interval=300.0,
        timeout=30.0,
        verify=SourceVerify("ssh", "/etc/healerd/allowed_signers"),
        credentials="/etc/healerd/git-token",
    )
    assert (two.name, two.verify, two.known_hosts, two.ref) == (
        "fleet",
        SourceVerify("gpg", "/etc/healerd/fleet.asc"),
        "/etc/healerd/known_hosts",
        "main",
    )
    assert (three.name, three.verify.kind, three.interval) == ("local", "none", 60.0)
    assert check_settings(s) == []


def test_no_sources_by_default(tmp_path: Path) -> None:
    assert Settings().sources == ()
    assert load(tmp_path, "sources: []\n").sources == ()


def test_verify_must_be_written_out(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, "sources:\n  - git: https://h.example/r.git\n")
    assert [(line, field) for line, field, _ in errors] == [(2, "sources[0].verify")]
    assert "none written out" in errors[0][2]


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ("git: ftp://h.example/r.git", "git", "not one of"),
        ("git: https://user:secret@h.example/r.git", "git", "must not hold credentials"),
        ("git: https://tok@h.example/r.git", "git", "must not hold credentials"),
        ("git: 42", "git", "is required"),
        ("git: https:///r.git", "git", "names no host"),
        ("ref: '-x'", "ref", "branch or tag"),
        ("ref: a..b", "ref", "branch or tag"),
        ("path: /etc", "path", "relative"),
        ("path: a/../../etc", "path", "relative"),
        ("path: hosts/%x/", "path", "placeholders"),
        ("interval: 1s", "interval", "at least 10s"),
        ("timeout: soon", "timeout", ""),
        ("credentials: git-token", "credentials", "absolute path"),
        ("verify: {allowed_signers: rel}", "verify.allowed_signers", "absolute path"),
        ("verify: {ssh: /x}", "verify.ssh", "allowed_signers"),
        ("verify: yes", "verify", "the word none"),
        ("colour: blue", "colour", "unknown key"),
    ],
)
def test_each_mistake_is_named_with_its_line(
    tmp_path: Path, entry: str, field: str, words: str
) -> None:
    base = {"git": "https://h.example/r.git", "verify": SIGNERS}
    key = entry.split(":", 1)[0]
    lines = [f"    {k}: {v}" for k, v in base.items() if k != key]
    text = "sources:\n  - " + entry + "\n" + "\n".join(lines) + "\n"
    errors = errors_of(tmp_path, text)
    assert [(line, f) for line, f, _ in errors] == [(2, f"sources[0].{field}")], errors
    assert words.lower() in errors[0][2].lower()
    assert "secret" not in errors[0][2]


def test_plain_transports_only_with_a_signature_check(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, "sources:\n  - git: git://h.example/r.git\n    verify: none\n")
    assert errors[0][1] == "sources[0].verify"
    assert "only with a signature check" in errors[0][2]
    s = load(tmp_path, f"sources:\n  - git: git://h.example/r.git\n    verify: {SIGNERS}\n")
    assert s.sources[0].scheme == "git"


def test_names_are_unique(tmp_path: Path) -> None:
    text = (
        f"sources:\n  - git: https://a.example/x/r.git\n    verify: {SIGNERS}\n"
        f"  - git: https://b.example/y/r.git\n    verify: {SIGNERS}\n"
    )
    errors = errors_of(tmp_path, text)
    assert [f for _, f, _ in errors] == ["sources"]
    assert "two sources are named 'r'" in errors[0][2]


def test_not_a_list(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, "sources: {git: x}\n")
    assert [(line, f) for line, f, _ in errors] == [(1, "sources")]


def test_host_placeholders() -> None:
    src = GitSource("s", "file:///r", path="hosts/%H/%l/100%%/")
    assert src.subdir("edge-7.example.net") == "hosts/edge-7.example.net/edge-7/100%"
    assert GitSource("s", "file:///r").subdir("h") == ""


def test_masked_url() -> None:
    assert masked_git_url("https://u:tok@h.example/r.git") == "https://***@h.example/r.git"
    assert masked_git_url("ssh://git@h.example/r.git") == "ssh://git@h.example/r.git"
    assert masked_git_url("https://h.example/r.git") == "https://h.example/r.git"
    assert "tok" not in masked_git_url("ssh://git:tok@h.example/r.git")
