"""Security review findings on the config side (issue 15): each test failed before its fix.

1. Files were checked, then read again by name (TOCTOU); symlinks, directories and
   non-regular files were not looked at: now one trusted open (healerd.config.trust.
   read_trusted) serves every config, settings and env file, at load and at container
   creation. These tests drive it with real files, symlinks and FIFOs, and with
   directories chowned to nobody (uid 65534) as "user-owned".
2. healerd.yaml could switch its own check off: now it is always checked strictly.
5. Unbounded input: replicas, merge keys, file sizes, durations, healthcheck timing,
   cpus, services per file, entries per list, quadratic port checks.
9. A secret echoed in an error: environment errors name the key or the place, never a
   value.

`trusted_tmp_dir` is shared with the other config tests: strict modes check every
directory up to `/`, and pytest's tmp_path sits in /tmp (world-writable, so untrusted).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from healerd.config import (
    EnvFileError,
    FileResult,
    SettingsError,
    effective_environment,
    load_conf_dir,
    load_service_file,
    load_settings,
    parse_service_text,
)
from healerd.config.yamlload import load_yaml
from tests.unit.harness.files import (
    NOBODY,
    as_root,
    conf_d,
    trusted_tmp_dir,
    user_dir,
)

SECRET = "hunter2-Zq7"
GOOD = "services:\n  web: {image: busybox}\n"


@pytest.fixture
def root() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


class Hang(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: float) -> Iterator[None]:
    """Fail instead of blocking (a FIFO without a writer blocked the old reader forever)."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still blocked after {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def only_error(results: list[FileResult]) -> str:
    [result] = results
    assert result.services is None, "accepted"
    [error] = result.errors
    return str(error)


# --- 1. one trusted open for every file ------------------------------------------------------


@as_root
def test_a_conf_d_symlink_into_a_user_owned_directory_is_refused(root: Path) -> None:
    conf = conf_d(root)
    bob = user_dir(root / "home-bob")
    target = write(bob / "evil.yaml", GOOD)  # root's file, but bob can replace it at will
    (conf / "evil.yaml").symlink_to(target)
    message = only_error(load_conf_dir(conf))
    assert f"refused: file {conf / 'evil.yaml'} (a symbolic link to {target}): its directory " in (
        message
    )
    assert f"{bob} is owned by uid {NOBODY}" in message


def test_a_conf_d_symlink_to_a_trusted_file_is_followed(root: Path) -> None:
    conf = conf_d(root)
    shared = root / "shared"
    shared.mkdir(mode=0o755)
    (conf / "web.yaml").symlink_to(write(shared / "web.yaml", GOOD))
    [result] = load_conf_dir(conf)
    assert result.services is not None and "web" in result.services


@as_root
def test_a_conf_d_symlink_is_refused_when_a_user_can_change_the_link(root: Path) -> None:
    """The target is trusted, but bob owns a directory above conf.d: he could swap it."""
    shared = root / "shared"
    shared.mkdir(mode=0o755)
    target = write(shared / "web.yaml", GOOD)
    conf = user_dir(root / "bob") / "etc" / "conf.d"
    conf.mkdir(mode=0o755, parents=True)
    (conf / "web.yaml").symlink_to(target)
    message = only_error(load_conf_dir(conf))
    assert f"refused: file {conf / 'web.yaml'}: its directory {root / 'bob'} is owned by" in (
        message
    )


def test_a_symlinked_directory_is_judged_by_where_it_leads(root: Path) -> None:
    """The config dir reached through a symlink: every real component is checked."""
    real = root / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o777)
    write(real / "web.yaml", GOOD)
    (root / "link").symlink_to(real)
    message = str(load_service_file(root / "link" / "web.yaml", strict_modes=True).errors[0])
    assert f"its directory {real} is writable by group and others (mode 0777" in message


@as_root
def test_an_env_file_in_a_user_owned_directory_is_refused_at_load(root: Path) -> None:
    conf = conf_d(root)
    bob = user_dir(root / "bob")
    write(bob / "app.env", "A=1\n")  # root-owned 0644: only its directory is bob's
    write(
        conf / "app.yaml", f"services:\n  app:\n    image: busybox\n    env_file: {bob}/app.env\n"
    )
    message = only_error(load_conf_dir(conf))
    assert f"refused: env file {bob}/app.env: its directory {bob} is owned by uid {NOBODY}" in (
        message
    )


def test_an_env_file_in_a_sticky_world_writable_directory_is_refused(root: Path) -> None:
    conf = conf_d(root)
    sticky = root / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    write(sticky / "app.env", "A=1\n")
    write(
        conf / "app.yaml",
        f"services:\n  app:\n    image: busybox\n    env_file: {sticky}/app.env\n",
    )
    message = only_error(load_conf_dir(conf))
    assert f"its directory {sticky} is writable by group and others (mode 1777" in message
    assert "sticky but anyone can create names in it" in message


class EnvScene:
    """A trusted service whose env file lives in `envdir`; loaded (and accepted) while
    everything is trusted, then changed behind healerd's back."""

    def __init__(self, root: Path, strict: bool = True) -> None:
        self.conf = conf_d(root)
        self.envdir = root / "env"
        self.envdir.mkdir(mode=0o755)
        self.env = write(self.envdir / "app.env", "LOG=info\n", 0o600)
        self.other = write(root / "other-service.env", f"DB_PASSWORD={SECRET}\n", 0o600)
        write(
            self.conf / "app.yaml",
            f"services:\n  app:\n    image: busybox\n    env_file: {self.env}\n",
        )
        [result] = load_conf_dir(self.conf, strict_modes=strict)
        assert result.services is not None, [str(e) for e in result.errors]
        self.spec = result.services["app"]
        assert effective_environment(self.spec) == (("LOG", "info"),)


@as_root
def test_at_container_creation_an_env_file_whose_directory_a_user_took_is_refused(
    root: Path,
) -> None:
    scene = EnvScene(root)
    os.chown(scene.envdir, NOBODY, NOBODY)
    # The user can now put this in a root container:
    scene.env.unlink()
    write(scene.env, "LD_PRELOAD=/home/bob/evil.so\n")
    with pytest.raises(EnvFileError) as caught:
        effective_environment(scene.spec)
    assert f"its directory {scene.envdir} is owned by uid {NOBODY}" in str(caught.value)


def test_at_container_creation_a_group_writable_env_file_is_refused(root: Path) -> None:
    scene = EnvScene(root)
    os.chmod(scene.env, 0o620)
    with pytest.raises(EnvFileError, match=r"refused: env file .* is writable by group"):
        effective_environment(scene.spec)


def test_at_container_creation_an_env_file_swapped_for_a_symlink_is_refused(root: Path) -> None:
    """A symlink to another service's root-only env file would hand its secrets over."""
    scene = EnvScene(root)
    scene.env.unlink()
    scene.env.symlink_to(scene.other)
    with pytest.raises(EnvFileError) as caught:
        effective_environment(scene.spec)
    assert "is a symbolic link, which healerd does not follow here" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("strict", [True, False])
def test_at_container_creation_a_fifo_is_refused_without_blocking(root: Path, strict: bool) -> None:
    scene = EnvScene(root, strict)
    scene.env.unlink()
    os.mkfifo(scene.env, 0o600)
    with no_hang(5), pytest.raises(EnvFileError, match=r"is a FIFO .*, not a regular file"):
        effective_environment(scene.spec)  # as the executor calls it


@pytest.mark.parametrize("strict", [True, False])
def test_a_fifo_as_a_service_file_or_env_file_is_refused_without_blocking(
    root: Path, strict: bool
) -> None:
    conf = conf_d(root)
    os.mkfifo(conf / "pipe.yaml", 0o600)
    with no_hang(5):
        result = load_service_file(conf / "pipe.yaml", strict_modes=strict)
    assert "is a FIFO (named pipe), not a regular file" in str(result.errors[0])
    os.mkfifo(conf / "pipe.env", 0o600)
    write(conf / "app.yaml", "services:\n  app:\n    image: busybox\n    env_file: pipe.env\n")
    with no_hang(5):
        result = load_service_file(conf / "app.yaml", strict_modes=strict)
    assert "is a FIFO (named pipe), not a regular file" in str(result.errors[0])


def test_a_device_is_no_env_file_even_without_strict_modes() -> None:
    text = "services:\n  app:\n    image: busybox\n    env_file: /dev/null\n"
    [error] = parse_service_text(text, "app.yaml").errors
    assert error.reason == "refused: env file /dev/null is a character device, not a regular file"


@as_root
def test_strict_modes_false_skips_owners_and_modes_but_not_file_types(root: Path) -> None:
    conf = conf_d(root)
    bob = user_dir(root / "bob")
    os.chown(write(bob / "app.env", "A=1\n", 0o666), NOBODY, NOBODY)
    write(
        conf / "app.yaml", f"services:\n  app:\n    image: busybox\n    env_file: {bob}/app.env\n"
    )
    [result] = load_conf_dir(conf, strict_modes=False)
    assert result.services is not None
    assert effective_environment(result.services["app"]) == (("A", "1"),)  # as loaded
    with pytest.raises(EnvFileError, match="owned by uid"):
        effective_environment(result.services["app"], strict_modes=True)


@as_root
def test_healerds_own_user_is_trusted(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = user_dir(root / "own")
    path = write(own / "web.yaml", GOOD)
    os.chown(path, NOBODY, NOBODY)
    assert "is owned by uid 65534" in str(load_service_file(path, strict_modes=True).errors[0])
    monkeypatch.setattr(os, "geteuid", lambda: NOBODY)  # healerd running as nobody
    assert load_service_file(path, strict_modes=True).services is not None


# --- 2. healerd.yaml cannot switch its own check off ------------------------------------------


def test_a_world_writable_healerd_yaml_cannot_turn_strict_modes_off(root: Path) -> None:
    path = write(root / "healerd.yaml", "strict_modes: false\n", 0o666)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    [error] = caught.value.errors
    assert str(error).startswith(
        f"{path}: file: refused: settings file {path} is writable by group and others"
    )
    assert "strict_modes: false cannot help" in error.reason
    write(path, "strict_modes: false\nworkers: 0\n", 0o666)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert [e.field for e in caught.value.errors] == ["file"]  # nothing in it was read


@as_root
def test_healerd_yaml_in_a_user_owned_directory_is_refused(root: Path) -> None:
    config = user_dir(root / "etc-healerd")
    path = write(config / "healerd.yaml", "strict_modes: false\n")
    with pytest.raises(SettingsError, match=f"its directory {config} is owned by uid {NOBODY}"):
        load_settings(path)


def test_a_symlinked_healerd_yaml_is_refused(root: Path) -> None:
    real = write(root / "real.yaml", "strict_modes: false\n")
    (root / "healerd.yaml").symlink_to(real)
    with pytest.raises(SettingsError, match="is a symbolic link"):
        load_settings(root / "healerd.yaml")


def test_a_trusted_healerd_yaml_may_turn_strict_modes_off(root: Path) -> None:
    path = write(root / "healerd.yaml", "strict_modes: false\n")
    assert load_settings(path).strict_modes is False


# --- 5. bounds ------------------------------------------------------------------------------


def one_error(text: str) -> str:
    result = parse_service_text(text, "t.yaml")
    assert result.services is None, "accepted"
    [error] = result.errors
    return str(error)


def web(fields: str) -> str:
    return "services:\n  web:\n    image: busybox\n" + "".join(
        f"    {f}\n" for f in fields.split("\n")
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("replicas: 1001", "t.yaml:4:5: services.web.replicas: must be at most 1000"),
        ("cpus: 1.0e-10", "services.web.cpus: must be from 0.01 to 1024 CPUs, not 1e-10"),
        ("cpus: 0.001", "services.web.cpus: must be from 0.01 to 1024 CPUs, not 0.001"),
        ("cpus: 2000", "services.web.cpus: must be from 0.01 to 1024 CPUs, not 2000"),
        ("mem_limit: 1k", "services.web.mem_limit: must be at least 6m"),
        ("unhealthy_grace: 1.0e+300", "services.web.unhealthy_grace: must be at most 168h"),
        ("unhealthy_grace: 169h", "services.web.unhealthy_grace: must be at most 168h"),
        (
            "healthcheck: {test: [CMD, x], interval: 1ms}",
            "services.web.healthcheck.interval: must be at least 1s",
        ),
        (
            "healthcheck: {test: [CMD, x], timeout: 100ms}",
            "services.web.healthcheck.timeout: must be at least 1s",
        ),
        (
            "healthcheck: {test: [CMD, x], start_period: 1us}",
            "services.web.healthcheck.start_period: must be 0 or at least 1s",
        ),
        (
            "healthcheck: {test: [CMD, x], retries: 101}",
            "services.web.healthcheck.retries: must be at most 100",
        ),
        ("update_config: {parallelism: 1001}", "update_config.parallelism: must be at most 1000"),
        ("restart_policy: {window: 1.0e+300}", "restart_policy.window: must be at most 168h"),
        ("stop_grace_period: 1.0e+300", "services.web.stop_grace_period: must be at most 168h"),
    ],
)
def test_every_quantity_has_a_bound(fields: str, message: str) -> None:
    assert message in one_error(web(fields))


def test_quantities_at_their_bounds_are_accepted() -> None:
    text = web(
        "replicas: 1000\ncpus: 0.01\nmem_limit: 6m\nunhealthy_grace: 168h\n"
        "healthcheck: {test: [CMD, x], interval: 1s, timeout: 1s, start_period: 0, retries: 100}"
    )
    assert parse_service_text(text, "t.yaml").errors == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resync_interval: 1ms\n", "resync_interval: must be at least 1s"),
        ("engine_timeout: 1.0e+300\n", "engine_timeout: must be at most 168h"),
        ("backoff_base: 1us\n", "backoff_base: must be at least 1ms"),
        ("engine_call_burst: 1000001\n", "from 1 to 1000000"),
    ],
)
def test_settings_have_bounds(root: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(write(root / "healerd.yaml", text))


def test_services_per_file_are_capped() -> None:
    text = "services:\n" + "".join(f"  s{i}: {{image: busybox}}\n" for i in range(1001))
    assert one_error(text) == (
        "t.yaml:1:1: services: declares 1001 services; a file may declare at most 1000 "
        "(split it into several files)"
    )


def test_lists_in_a_service_are_capped() -> None:
    items = ", ".join(f"V{i}=x" for i in range(1001))
    message = one_error(web(f"environment: [{items}]"))
    assert (
        message
        == "t.yaml:4:5: services.web.environment: has 1001 entries; at most 1000 are allowed"
    )
    files = ", ".join(f"e{i}.env" for i in range(33))
    assert "names 33 files; a service may name at most 32" in one_error(web(f"env_file: [{files}]"))


def test_errors_listed_per_file_are_capped() -> None:
    result = parse_service_text(web("command: [" + ", ".join(["{}"] * 500) + "]"), "t.yaml")
    assert len(result.errors) == 101
    assert (
        str(result.errors[-1]) == "t.yaml: file: 400 more errors not shown (at most 100 are listed)"
    )


@pytest.mark.parametrize("which", ["service file", "healerd.yaml", "env file"])
def test_files_over_one_mib_are_refused_naming_the_file(root: Path, which: str) -> None:
    big = "# padding\n" * (2**20 // 10 + 1)  # valid YAML, and no env line: only comments
    if which == "healerd.yaml":
        path = write(root / "healerd.yaml", big)
        with pytest.raises(SettingsError, match=f"settings file {path} is larger than 1 MiB"):
            load_settings(path)
        return
    if which == "env file":
        write(root / "app.env", big)
        text = "services:\n  app:\n    image: busybox\n    env_file: app.env\n"
        path = write(root / "app.yaml", text)
    else:
        path = write(root / "app.yaml", GOOD + big)
    result = load_service_file(path, strict_modes=True)
    assert result.services is None
    kind = "env file " + str(root / "app.env") if which == "env file" else f"file {path}"
    assert f"refused: {kind} is larger than 1 MiB" in str(result.errors[0])


def test_merge_keys_are_bounded_while_they_are_built() -> None:
    """1500 mappings, each merging the one before: 1.1 million entries in a 55 KiB file.
    The old loader built them all (184 MiB, 20 s) before any check saw them."""
    text = "x-0: &m0 {k0: 0}\n" + "".join(
        f"x-{i}: &m{i} {{<<: *m{i - 1}, k{i}: {i}}}\n" for i in range(1, 1500)
    )
    tracemalloc.start()
    try:
        result = parse_service_text(text + "services: {}\n", "t.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [str(e) for e in result.errors] == [
        "t.yaml:448:8: yaml: merge keys expand to more than 100000 entries in the file"
    ]
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_merge_keys_are_bounded_per_mapping() -> None:
    maps = "".join(
        f"x-{m}: &{m} {{{', '.join(f'{m}{i}: 1' for i in range(4000))}}}\n" for m in "abc"
    )
    result = parse_service_text(f"{maps}x-d: {{<<: [*a, *b, *c]}}\nservices: {{}}\n", "t.yaml")
    assert [e.reason for e in result.errors] == [
        "merge keys expand to more than 10000 entries in one mapping"
    ]


def test_a_mapping_merged_twice_counts_once_and_the_first_wins() -> None:
    keys = ", ".join(f"k{i}: 1" for i in range(5000))
    aliases = ", ".join(["*a"] * 2000)
    text = f"x-a: &a {{{keys}, x: 1}}\nx-b: &b {{x: 2}}\nx-c: {{<<: [*a, *b, {aliases}]}}\n"
    data, errors = load_yaml(text, "t.yaml")
    assert errors == []
    assert len(data["x-c"]) == 5001 and data["x-c"]["x"] == 1


def test_merge_keys_are_bounded_per_file() -> None:
    keys = ", ".join(f"k{i}: 1" for i in range(9000))
    merges = "".join(f"x-{i}: {{<<: *a}}\n" for i in range(12))
    result = parse_service_text(f"x-a: &a {{{keys}}}\n{merges}services: {{}}\n", "t.yaml")
    assert [e.reason for e in result.errors] == [
        "merge keys expand to more than 100000 entries in the file"
    ]


def test_fixed_host_ports_are_checked_in_linear_time() -> None:
    """30 services with 1000 fixed host ports each: the old pairwise check made 4e8
    comparisons (minutes); an index makes 30000 lookups."""
    lines = ["services:"]
    for i in range(30):
        ports = ", ".join(f'"{i * 1000 + j + 1}:80"' for j in range(1000))
        lines.append(f"  s{i}: {{image: busybox, ports: [{ports}]}}")
    lines.append('  clash: {image: busybox, ports: ["127.0.0.1:29500:80"]}')
    with no_hang(30):
        result = parse_service_text("\n".join(lines) + "\n", "t.yaml")
    assert [str(e) for e in result.errors] == [
        "t.yaml:32:27: services.clash.ports: host port 127.0.0.1:29500/tcp is also published "
        "by service 's29' in this file: two containers cannot hold one fixed host port"
    ]


# --- 9. no environment value in any error -----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "hint"),
    [
        (f"environment: ['DB_PASSWORD:{SECRET}']", "services.web.environment[0]", "not KEY:value"),
        (f"environment: ['DB_PASSWORD: {SECRET}']", "services.web.environment[0]", "not KEY:value"),
        (
            f"environment: ['DB_URL:postgres://u:{SECRET}@db/x?ssl=1']",
            "services.web.environment[0]",
            "not KEY:value",
        ),
        (f"environment: ['{SECRET} x']", "services.web.environment[0]", ""),
        (f"environment: {{'DB_PASSWORD={SECRET}': ''}}", "services.web.environment", "KEY: value"),
        (f"environment: {{'DB PASSWORD {SECRET}': x}}", "services.web.environment", ""),
        (f"environment: {{A: !!int {SECRET}}}", "yaml", "cannot read the value as"),
        (f"environment: [A=1, A={SECRET}]", "services.web.environment.A", ""),
        (f"environment: {{A: [{SECRET}]}}", "services.web.environment.A", ""),
    ],
)
def test_environment_errors_never_show_a_value(fields: str, field: str, hint: str) -> None:
    result = parse_service_text(web(fields), "t.yaml")
    assert result.services is None
    [error] = result.errors
    assert "hunter2" not in str(error), str(error)
    assert error.field == field
    assert hint in error.reason


def test_a_key_written_with_a_colon_gets_the_fix_and_is_not_shown() -> None:
    [error] = parse_service_text(web(f"environment: ['DB_PASSWORD:{SECRET}']"), "t.yaml").errors
    assert str(error) == (
        "t.yaml:4:19: services.web.environment[0]: is not KEY=value: write KEY=value, not "
        "KEY:value; the entry is not shown, as it may hold a secret"
    )


def test_an_entry_without_equals_is_looked_up_and_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lone word under environment is a name whose value the project's variables give,
    as in Compose; it may be a pasted value as well: no such variable, so it is left out,
    and no error or log line shows it."""
    caplog.set_level("DEBUG")
    result = parse_service_text(web(f"environment: [{SECRET.replace('-', '_')}]"), "t.yaml")
    assert result.errors == ()
    assert result.services is not None and result.services["web"].environment == ()
    assert "hunter2" not in caplog.text


def test_labels_still_show_their_entries() -> None:
    [error] = parse_service_text(web("labels: ['team:platform']"), "t.yaml").errors
    assert "'team:platform' has no value" in error.reason


def test_the_trusted_tmp_dir_is_trusted(root: Path) -> None:
    """The fixture itself: the directory it gives is 0755 and passes the strict check."""
    from healerd.config.trust import read_trusted

    assert stat.S_IMODE(os.stat(root).st_mode) == 0o755
    write(root / "f", "x")
    assert read_trusted(root / "f", "file", strict=True, limit=10) == b"x"
