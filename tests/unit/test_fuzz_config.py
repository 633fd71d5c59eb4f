"""Fuzzing the config loader (issue 8): whatever lies in conf.d, healerd.yaml or an env
file, loading gives valid services or clean errors (ConfigError with the file, and a line
where the input has lines), never another exception, and never hangs.

test_config_services.py already feeds parse_service_text random text, YAML-ish fragments
and random structures dumped to YAML. Here: raw bytes through the file loaders (encodings,
BOMs, NULs, truncation), valid and invalid example files mutated line by line and byte by
byte, structures dumped with aliases, flow style and as JSON, pathological YAML (alias
bombs, recursive aliases, deep nesting, huge numbers), whole conf.d directories through
load_conf_dir and DesiredStore over several scans, healerd.yaml, and env files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healerd.config import (
    ConfigError,
    DesiredState,
    DesiredStore,
    EnvFileError,
    FileResult,
    Settings,
    SettingsError,
    load_conf_dir,
    load_service_file,
    load_settings,
    parse_service_text,
)
from healerd.config.envfile import parse_env_text, read_env_file
from healerd.config.keys import MAX_ENTRIES
from healerd.config.rollout import UPDATE_ORDERS
from healerd.config.servicefile import SERVICE_NAME_RE
from healerd.config.units import MAX_DURATION
from healerd.config.values import MAX_CPUS, MAX_REPLICAS, MIN_CPUS, PULL_POLICIES
from healerd.model import ServiceSpec
from tests.unit.harness.files import trusted_tmp_dir

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus" / "invalid"
EXAMPLE = REPO / "config" / "conf.d" / "example.yaml"
SETTINGS_EXAMPLE = REPO / "config" / "healerd.yaml"
SEEDS: list[bytes] = [EXAMPLE.read_bytes()] + [
    p.read_bytes() for p in sorted(CORPUS.glob("*.yaml")) if p.name != "EXPECTED.yaml"
]
ENV_SEEDS = [p.read_bytes() for p in sorted(CORPUS.glob("*.env"))]
# Errors about a file as a whole; every other error points at a line.
FILE_WIDE_FIELDS = {"file", "yaml", "directory"}
# One call of the loader on a few KiB must not take anywhere near this long.
HANG_SECONDS = 10.0
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class Hang(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts the loader (tests run in the main thread)."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still loading after {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """A directory that passes the strict checks (healerd.yaml and env files are read
    strictly): not under /tmp, which anyone can write."""
    with trusted_tmp_dir() as d:
        yield d


# -- what a clean result is --------------------------------------------------------------


def line_count(data: bytes | str) -> int:
    """Lines as an editor or as YAML counts them (YAML also breaks lines at \\r, NEL, LS
    and PS), whichever is more: the upper bound of a line number in an error."""
    text = data.decode("utf-8-sig", "replace") if isinstance(data, bytes) else data
    return max(text.count("\n"), len(text.splitlines())) + 1


def check_error(e: object, file: str, lines: int) -> None:
    assert isinstance(e, ConfigError), e
    assert e.file == file, e
    assert isinstance(e.reason, str) and e.reason, e
    text = str(e)
    assert text.startswith(e.where) and "\n" not in e.where, text
    if e.line is None:
        assert e.field in FILE_WIDE_FIELDS, text
        assert e.column is None, text
    else:
        assert 1 <= e.line <= lines, (text, lines)
        assert e.column is None or e.column >= 1, text


def check_spec(name: str, spec: ServiceSpec, file: str) -> None:
    """What the rest of healerd counts on from a valid service."""
    assert isinstance(spec, ServiceSpec)
    assert spec.name == name and SERVICE_NAME_RE.fullmatch(name), name
    assert spec.source_file == file
    assert isinstance(spec.image, str) and spec.image
    assert isinstance(spec.replicas, int) and 0 <= spec.replicas <= MAX_REPLICAS
    u, r = spec.update_config, spec.restart_policy
    assert 1 <= u.parallelism <= MAX_REPLICAS and u.order in UPDATE_ORDERS
    assert u.progress_deadline > 0 and r.delay > 0 and r.window > 0 and r.max_delay >= r.delay
    for seconds in (spec.stop_grace_period, spec.unhealthy_grace, u.delay, u.min_ready_seconds):
        assert 0 <= seconds <= MAX_DURATION, spec
    for seconds in (u.progress_deadline, r.delay, r.max_delay, r.window):
        assert seconds <= MAX_DURATION, spec
    h = spec.healthcheck
    if h is not None:
        for maybe in (h.interval, h.timeout, h.start_period):
            assert maybe is None or maybe == 0 or 1 <= maybe <= MAX_DURATION, h
        assert h.retries is None or 1 <= h.retries <= 100, h
    assert spec.pull_policy in PULL_POLICIES
    assert spec.mem_limit is None or spec.mem_limit >= 6 * 2**20
    assert spec.cpus is None or MIN_CPUS <= spec.cpus <= MAX_CPUS
    for entries in (spec.environment, spec.labels, spec.volumes, spec.ports, spec.networks):
        assert len(entries) <= MAX_ENTRIES
    if spec.has_fixed_host_port:
        assert spec.replicas <= 1 and spec.update_order == "stop-first"
    for p in spec.ports:
        assert 0 < p.container_port < 65536
        assert p.host_port is None or 0 < p.host_port < 65536
    assert len(spec.spec_hash) == 16


def check_result(result: object, file: str, lines: int) -> None:
    assert isinstance(result, FileResult), result
    assert result.file == file
    assert (result.services is None) == bool(result.errors)
    for e in result.errors:
        check_error(e, file, lines)
    for name, spec in (result.services or {}).items():
        check_spec(name, spec, file)


def load_bytes(workdir: Path, data: bytes, name: str = "fuzz.yaml") -> FileResult:
    path = workdir / name
    path.write_bytes(data)
    with no_hang():
        result = load_service_file(path, name)
    check_result(result, name, line_count(data))
    return result


def load_text(text: str, file: str = "conf.d/fuzz.yaml") -> FileResult:
    with no_hang():
        result = parse_service_text(text, file, base_dir=CORPUS)
    check_result(result, file, line_count(text))
    return result


# -- strategies ------------------------------------------------------------------------------

FRAGMENTS = [
    b"services:", b"  web:", b"    image: ", b"busybox:1", b"replicas: ", b"ports:", b"- ",
    b"env_file: good.env", b"env_file: malformed.env", b"healthcheck:", b"update_config:",
    b"restart_policy:", b"&a ", b"*a", b"<<: *a", b"!!binary ", b"!!python/object:os.system ",
    b"!!int ", b"!!float ", b"? ", b": ", b"- - - ", b"{", b"}", b"[", b"]", b",", b"'", b'"',
    b"\\", b"#", b"|", b">-", b"---", b"...", b"%YAML 1.1", b"%TAG ! tag:x,2000:", b"\t",
    b"\r\n", b"\r", b"\n", b" ", b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"\xc3", b"\xe2\x80\xa8",
    b"\xf0\x9f\x92\xa9", b"\x85", b"\x1b[31m", b"1e400", b".nan", b"-.inf", b"0x_", b"0o7",
    b"9" * 30, b"1:2:3", b"2024-02-30", b"~", b"null", b"yes", b"NO", b"=", b"x-a:", b"<<",
]  # fmt: skip

fragment_bytes = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join)
encoded_text = st.builds(
    lambda text, enc: text.encode(enc, "replace"),
    st.text(max_size=200),
    st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "latin-1", "utf-32"]),
)
any_bytes = st.binary(max_size=400) | fragment_bytes | encoded_text


@st.composite
def mutated(draw: st.DrawFn, seeds: Sequence[bytes]) -> bytes:
    """A seed file with a few line- and byte-level edits, as a half-finished edit, a bad
    merge or a damaged disk would leave it."""
    data = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 6))):
        lines = data.split(b"\n")
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        j = draw(st.integers(0, max(0, len(lines) - 1)))
        op = draw(st.integers(0, 9))
        if op == 0:  # delete a run of lines
            del lines[min(i, j) : max(i, j) + 1]
        elif op == 1:  # duplicate a line elsewhere
            lines.insert(j, lines[i])
        elif op == 2:  # swap two lines
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3:  # re-indent a line
            lines[i] = b" " * draw(st.integers(0, 9)) + lines[i].lstrip(b" ")
        elif op == 4:  # splice in a fragment
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(FRAGMENTS)) + lines[i][at:]
        elif op == 5:  # uncomment a line (the example is full of commented-out fields)
            lines[i] = lines[i].replace(b"# ", b"", 1)
        elif op == 6:  # truncate the file mid-write
            cut = draw(st.integers(0, len(data)))
            lines = data[:cut].split(b"\n")
        elif op == 7:  # change one byte
            raw = bytearray(lines[i])
            if raw:
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            lines[i] = bytes(raw)
        elif op == 8:  # paste a line from another seed
            other = draw(st.sampled_from(seeds)).split(b"\n")
            lines.insert(i, other[draw(st.integers(0, len(other) - 1))])
        else:  # Windows line endings
            lines = [line + b"\r" for line in lines]
        data = b"\n".join(lines)
    return data


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["10s", "1m", "256m", "8080:80", "img:1", "CMD", "stop-first", "x-y"])
)
_KEYS = st.sampled_from(
    ["services", "web", "image", "replicas", "ports", "environment", "labels", "command",
     "healthcheck", "test", "update_config", "parallelism", "order", "restart_policy",
     "delay", "env_file", "volumes", "x-a", "<<", "priority"]
) | st.text(max_size=6)  # fmt: skip


@st.composite
def shared_structures(draw: st.DrawFn) -> object:
    """Nested data in which some parts are the same object twice: yaml.dump writes those
    as anchors and aliases."""
    pool: list[object] = []

    def build(depth: int) -> object:
        if pool and draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from(pool))
        if depth > 3 or draw(st.integers(0, 2)) == 0:
            return draw(_scalars)
        if draw(st.booleans()):
            value: object = [build(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        else:
            value = {draw(_KEYS): build(depth + 1) for _ in range(draw(st.integers(0, 3)))}
        pool.append(value)
        return value

    services = {draw(_KEYS): build(1) for _ in range(draw(st.integers(0, 3)))}
    return {"services": services} if draw(st.booleans()) else build(0)


def dump(data: object, style: int) -> str:
    if style == 0:
        return yaml.dump(data, allow_unicode=True, default_flow_style=False)
    if style == 1:
        return yaml.dump(data, default_flow_style=True, width=30)
    if style == 2:
        return yaml.dump(data, canonical=True)
    return json.dumps(data, allow_nan=True, default=str)


# -- service files -----------------------------------------------------------------------------


@FUZZ
@given(any_bytes)
def test_random_bytes_in_a_service_file(workdir: Path, data: bytes) -> None:
    load_bytes(workdir, data)


@FUZZ
@given(mutated(SEEDS))
def test_mutated_example_and_corpus_files(workdir: Path, data: bytes) -> None:
    load_bytes(workdir, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    load_text(text)


@FUZZ
@given(shared_structures(), st.integers(0, 3))
def test_structures_with_aliases_flow_style_and_json(data: object, style: int) -> None:
    try:
        text = dump(data, style)
    except (ValueError, yaml.YAMLError):  # JSON of a dict with a non-string key, say
        return
    load_text(text)


# 10**9 "x" in nine levels of lists of ten aliases, in 600 bytes.
ALIAS_BOMB = "x-0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"x-{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


def _deep(depth: int, open_: str, close: str) -> str:
    return "services:\n  web:\n    image: busybox:1\n    command: " + open_ * depth + close * depth


PATHOLOGICAL = {
    "alias bomb": f"{ALIAS_BOMB}services:\n  web:\n    image: busybox:1\n"
    "    environment: *a8\n    labels: *a8\n    ports: *a8\n    volumes: *a8\n"
    "    x-a: *a8\n    healthcheck: *a8\n    update_config: *a8\n    mem_limit: *a8\n"
    "    restart_policy: {delay: *a8, bogus: *a8}\n    env_file: *a8\n    user: *a8\n",
    "alias bomb in merge keys": "x-0: &m0 {a: 1, b: 2}\n"
    + "".join(f"x-{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}\n" for i in range(1, 30))
    + "services:\n  web:\n    <<: *m29\n    image: busybox:1\n",
    "recursive list": "services:\n  web:\n    image: busybox:1\n    command: &r [*r, *r]\n",
    "recursive mapping": "services: &s\n  web: *s\n",
    "recursive environment": "services:\n  web: &w\n    image: busybox:1\n    environment: *w\n",
    "recursive healthcheck": "services:\n  web:\n    image: busybox:1\n"
    "    healthcheck: &h {test: [CMD, *h]}\n",
    "recursive merge": "x-a: &a\n  <<: *a\nservices: {}\n",
    "deep list": _deep(5000, "[", "]"),
    "deep mapping": _deep(900, "{a: ", "}"),
    "deeper mapping": _deep(20000, "{a: ", "}"),
    "deep block": "services:\n" + "".join(" " * i + "- \n" for i in range(3000)),
    "huge int": "services:\n  web:\n    image: busybox:1\n    replicas: " + "9" * 5000,
    "huge hex": "services:\n  web:\n    image: busybox:1\n    replicas: 0x" + "f" * 5000,
    "huge float": "services:\n  web:\n    image: busybox:1\n    stop_grace_period: 1" + "0" * 400,
    "huge key": "services:\n  " + "w" * 100_000 + ":\n    image: busybox:1\n",
    "many services": "services:\n"
    + "".join(f"  s{i}:\n    image: busybox:1\n    ports: ['{8000 + i % 50}:80']\n"
              for i in range(200)),
    "many errors": "services:\n  web:\n    image: busybox:1\n    command: ["
    + ", ".join(["{}"] * 1000)
    + "]\n",
    "long line": "services:\n  web:\n    image: " + "a" * 200_000 + "\n",
    "control characters": "services:\n  web:\n    image: busybox:1\x07\x1b\x7f\n",
    "surrogate escape": 'services:\n  web:\n    image: "\\ud800"\n',
    "python tag": "services: !!python/object/apply:os.system ['true']\n",
    "two documents": "services: {}\n---\nservices: {}\n",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_yaml(name: str) -> None:
    load_text(PATHOLOGICAL[name])


@pytest.mark.parametrize(
    "field",
    ["command: [a, *a8]", "entrypoint: *a8", "healthcheck: {test: [CMD, *a8]}", "networks: *a8",
     "cpus: *a8", "pull_policy: *a8", "update_config: {order: *a8}", "healerd.yaml workers: *a8"],
)  # fmt: skip
def test_an_alias_bomb_does_not_hang_the_loader(workdir: Path, field: str) -> None:
    if field.startswith("healerd.yaml "):
        path = workdir / "bomb-healerd.yaml"
        path.write_text(ALIAS_BOMB + field.split(" ", 1)[1] + "\n")
        with no_hang(0.3), pytest.raises(SettingsError):
            load_settings(path)
        return
    text = f"{ALIAS_BOMB}services:\n  web:\n    image: busybox:1\n    {field}\n"
    with no_hang(0.3):
        result = parse_service_text(text, "conf.d/bomb.yaml")
    assert result.services is None and result.errors


# -- conf.d as a whole -------------------------------------------------------------------------

_file_names = st.sampled_from(
    ["a.yaml", "b.yml", "z.yaml", ".hidden.yaml", "x.yaml~", "y.yaml.swp", "#t.yaml#",
     "c.yaml.dpkg-new", "d.YAML", "e.yaml.bak", "f.json", "g.yaml"]
)  # fmt: skip
_file_contents = mutated(SEEDS) | any_bytes | st.sampled_from(SEEDS)


def check_state(state: DesiredState, conf_d: Path, results: list[FileResult]) -> None:
    assert isinstance(state, DesiredState)
    files = {r.file for r in results}
    for e in state.errors:
        assert isinstance(e, ConfigError) and e.file in files, e
    for name, spec in state.services.items():
        check_spec(name, spec, spec.source_file)
        assert Path(spec.source_file).parent == conf_d
    assert set(state.broken_files) <= files
    names = [r.file for r in results if r.services is None]
    assert set(state.broken_files) >= set(names)


@settings(FUZZ, max_examples=60)
@given(st.lists(st.dictionaries(_file_names, _file_contents, max_size=4), min_size=1, max_size=3))
def test_conf_dir_scans(workdir: Path, scans: list[dict[str, bytes]]) -> None:
    """Several scans of a conf.d whose files come and go and break: every result is clean
    and DesiredStore merges them without raising (name and host port clashes included)."""
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        conf_d = Path(d) / "conf.d"
        conf_d.mkdir()
        store = DesiredStore()
        for files in scans:
            for old in conf_d.iterdir():
                old.unlink()
            for name, data in files.items():
                (conf_d / name).write_bytes(data)
            with no_hang():
                results = load_conf_dir(conf_d, strict_modes=False)
            for r in results:
                assert Path(r.file).parent == conf_d
                check_result(r, r.file, line_count((conf_d / Path(r.file).name).read_bytes()))
            with no_hang():
                state = store.update(results)
            check_state(state, conf_d, results)


# -- healerd.yaml -------------------------------------------------------------------------------

SETTINGS_SEEDS = [SETTINGS_EXAMPLE.read_bytes(), b"workers: 8\nlog_level: debug\n", b""]
_setting_keys = st.sampled_from(
    [*(f.name for f in Settings.__dataclass_fields__.values()), "x-note", "bogus", "<<"]
)
_settings_docs = st.dictionaries(_setting_keys | st.text(max_size=5), _scalars, max_size=6).map(
    lambda d: yaml.safe_dump(d, allow_unicode=True).encode()
)


@FUZZ
@given(any_bytes | mutated(SETTINGS_SEEDS) | _settings_docs)
def test_settings_files(workdir: Path, data: bytes) -> None:
    """Settings or SettingsError, whose every error names the file (and the line where the
    file has lines); nothing else."""
    path = workdir / "healerd.yaml"
    path.write_bytes(data)
    os.chmod(path, 0o644)
    try:
        with no_hang():
            loaded = load_settings(path)
    except SettingsError as exc:
        assert exc.errors, exc
        for e in exc.errors:
            check_error(e, str(path), line_count(data))
        assert str(exc)
        return
    assert isinstance(loaded, Settings)
    assert 1 <= loaded.workers <= 64
    for seconds in (loaded.resync_interval, loaded.backoff_base, loaded.backoff_max):
        assert 0.001 <= seconds <= MAX_DURATION
    assert loaded.resync_interval >= 1 and loaded.engine_timeout >= 1
    assert loaded.backoff_base <= loaded.backoff_max
    assert str(loaded.socket_path).startswith("/")


# -- env files -----------------------------------------------------------------------------------

SECRET = "Zq7SECRETvalue"
_env_keys = st.sampled_from(["A", "PATH", "x.y", "_k", "9bad", "a b", "", "export", "K-1"])
_env_values = st.builds(
    lambda pre, post: pre + SECRET + post,
    st.sampled_from(["", "'", '"', " ", "\\", '"\\q', "'unterminated", "a #", "# "]),
    st.sampled_from(["", "'", '"', " # c", "'x", '" trailing', "\\", "\\n"]),
)
_env_lines = st.one_of(
    st.builds(
        lambda export, key, eq, value: f"{export}{key}{eq}{value}",
        st.sampled_from(["", "export ", "  "]),
        _env_keys,
        st.sampled_from(["=", " = ", "", ":"]),
        _env_values,
    ),
    st.sampled_from(["", "# comment", "   ", "\t#x"]),
    st.text(max_size=20).map(lambda t: t.replace(SECRET[:3], "")),
)
env_texts = st.lists(_env_lines, max_size=12).map("\n".join)


@FUZZ
@given(env_texts)
def test_env_file_text_errors_never_show_a_value(text: str) -> None:
    with no_hang():
        pairs, errors = parse_env_text(text, "app.env")
    for e in errors:
        check_error(e, "app.env", line_count(text))
        assert e.line is not None
        assert SECRET not in str(e), str(e)
    for key, value in pairs:
        assert isinstance(key, str) and isinstance(value, str) and SECRET not in key


@FUZZ
@given(any_bytes | mutated(ENV_SEEDS) | env_texts.map(str.encode))
def test_env_files_on_disk_and_as_referenced_by_a_service(workdir: Path, data: bytes) -> None:
    """read_env_file returns pairs or raises EnvFileError (never showing a value); a
    service naming the file gets a clean error or a valid spec with a digest."""
    path = workdir / "app.env"
    path.write_bytes(data)
    try:
        with no_hang():
            pairs = read_env_file(path)
    except EnvFileError as exc:
        check_error(exc.error, str(path), line_count(data))
        assert SECRET not in str(exc)
        pairs = None
    text = "services:\n  web:\n    image: busybox:1\n    env_file: app.env\n"
    with no_hang():
        result = parse_service_text(text, "conf.d/web.yaml", base_dir=workdir)
    check_result(result, "conf.d/web.yaml", line_count(text))
    assert (result.services is None) == (pairs is None)
    if result.services is not None:
        assert len(result.services["web"].env_digest) == 64
    for e in result.errors:
        assert SECRET not in str(e), str(e)


_env_entries = st.builds(
    lambda key, sep, pre, post: f"{key}{sep}{pre}{SECRET}{post}",
    _env_keys,
    st.sampled_from(["=", ":", ": ", " ", "", "=:", " = "]),
    st.sampled_from(["", "'", '"', " ", "=", "a:", "@"]),
    st.sampled_from(["", "'", " # c", ":", "@db/x"]),  # no '=': SECRET never ends a key
)


@FUZZ
@given(st.lists(_env_entries, min_size=1, max_size=5), st.integers(0, 2))
def test_environment_errors_never_show_a_value(entries: list[str], form: int) -> None:
    """Finding 9: an entry written with ':' (or any other slip) is never echoed."""
    environment: object
    if form == 0:
        environment = entries  # the list form
    elif form == 1:
        environment = {entry: "x" for entry in entries}  # a value typed into the key
    else:
        environment = {f"K{i}": [entry] for i, entry in enumerate(entries)}  # wrong type
    service = {"image": "busybox:1", "environment": environment}
    result = load_text(yaml.safe_dump({"services": {"web": service}}))
    for e in result.errors:
        assert SECRET not in str(e), str(e)


def test_env_values_are_cut_only_at_newlines() -> None:
    pairs, errors = parse_env_text("A=x\x0cB=y\nC=1\n", "app.env")
    assert (pairs, errors) == ((("A", "x\x0cB=y"), ("C", "1")), [])
    pairs, errors = parse_env_text("A=x\u2028y\nC=1\n", "app.env")
    assert (pairs, errors) == ((("A", "x\u2028y"), ("C", "1")), [])
