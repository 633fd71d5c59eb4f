"""Issue 29, point 2, on a real dockerd: a reader cannot get healerd OOM-killed through
its logs. Reading a whole log into memory, decoding it and sending it as JSON took
healerd to 451 MiB for a 32 MiB log of NUL bytes (each one six bytes of JSON), and to
419 MiB for a 128 MiB text log: past the unit's MemoryMax=384M. Now the output is
streamed from the engine to the client, raw, with a default tail of 1,000 lines and a
cap of 8 MiB. healerd's peak RSS is read from its own /proc (VmHWM), not estimated."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE

import docker
import pytest

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import REPO, Healerd
from tests.support.polling import holds_for, wait_for

MIB = 2**20
LIMIT = 100 * MIB  # the most healerd's RSS may ever reach here
CUT = b"\n[healerd: output cut at 8 MiB: ask for less with --tail or --since]\n"
END = "END-OF-LOG"
# Long lines: the engine stores a line a JSON object, and 256 MiB of short ones would
# take it minutes to write.
TEXT_LINE = b"".join(b"%04d " % i for i in range(819)) + b"\n"  # 4,096 bytes


def command(source: str) -> str:
    """Print a file once, say so, then run until stopped."""
    return (
        f'["sh", "-c", "cat {source}; echo; echo {END}; trap \'exit 0\' TERM; sleep 86400 & wait"]'
    )


@pytest.fixture
def data() -> Iterator[Path]:
    """32 MiB of NUL bytes and 256 MiB of text, on disk (tmp_path is in RAM, /run), in a
    directory only root can write: healerd refuses a bind source under /var/tmp."""
    parent = Path("/var/lib/healerd-test")
    parent.mkdir(mode=0o755, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="logs-", dir=parent))
    try:
        (root / "nul.bin").write_bytes(b"\0" * (32 * MIB))
        with open(root / "text.txt", "wb") as f:
            for _ in range(256 * MIB // len(TEXT_LINE)):
                f.write(TEXT_LINE)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def peak_rss(pid: int) -> int:
    """The process's high-water mark of resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def logged_all(api: docker.APIClient, cluster: Cluster, service: str) -> bool:
    running = cluster.running(service)
    return bool(running) and END in bytes(api.logs(running[0]["Id"], tail=2)).decode(
        errors="replace"
    )


def ctl_bytes(healerd: Healerd, *args: str) -> tuple[int, bytes, str]:
    """healerctl's exit code, its stdout as bytes (a pipe: the output as it is), stderr."""
    p = subprocess.run(
        [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(healerd.socket), *args],
        capture_output=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def test_a_32_mib_nul_log_and_a_256_mib_text_log_keep_healerd_under_100_mib(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    data: Path,
) -> None:
    for name, file in (("nul", "nul.bin"), ("text", "text.txt")):
        config.service(
            f"{name}.yaml",
            name,
            1,
            command=command(f"/data/{file}"),
            volumes=f'["{data / file}:/data/{file}:ro"]',
        )
    healerd.start()
    assert healerd.pid is not None
    for name in ("nul", "text"):
        wait_for(
            f"{name}'s whole log written", lambda n=name: logged_all(api, cluster, n), 180, 0.5
        )
    at_start = peak_rss(healerd.pid)

    # What an admin types: no tail. (Before: the whole log, as JSON.)
    code, out, err = ctl_bytes(healerd, "logs", "nul")
    assert code == 0, err
    # The last 1,000 lines: the engine splits a line at 16 KiB, so 16 MiB of NULs: cut.
    assert out == b"\0" * (8 * MIB) + CUT
    code, out, err = ctl_bytes(healerd, "logs", "text")
    assert code == 0 and out.endswith(TEXT_LINE + b"\n" + END.encode() + b"\n"), err
    assert len(out) < 1001 * len(TEXT_LINE)
    # Everything asked for, twice at once: each answer is cut at 8 MiB.
    argv = [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(healerd.socket)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen([*argv, "logs", name, "--tail", "all"], stdout=PIPE, stderr=PIPE, env=env)
        for name in ("text", "nul")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    text, nul = (o for o, _ in outs)
    assert text.startswith(TEXT_LINE) and text.endswith(CUT) and len(text) == 8 * MIB + len(CUT)
    assert nul == b"\0" * (8 * MIB) + CUT
    peak = peak_rss(healerd.pid)
    print(f"healerd peak RSS: {at_start / MIB:.1f} MiB at start, {peak / MIB:.1f} MiB after")
    assert peak < LIMIT, f"healerd reached {peak / MIB:.0f} MiB serving logs"
    assert healerd.alive()


def test_logs_follow_prints_every_line_once(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    """`healerctl logs -f` asks for what was written since the last answer's end, and
    healerd asks the engine for exactly that (since .. until): no line twice, none lost."""
    counting = (
        '["sh", "-c", "trap \'exit 0\' TERM; i=0; '
        'while :; do i=$$((i+1)); echo line $$i; sleep 0.05; done"]'
    )
    config.service("count.yaml", "count", 1, command=counting)
    healerd.start()
    wait_for("count runs", lambda: cluster.running("count"), 30)
    argv = [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(healerd.socket)]
    p = subprocess.Popen(
        [*argv, "logs", "count", "-f"],
        stdout=PIPE,
        stderr=PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        holds_for("healerctl follows", lambda: p.poll() is None, 4.0)
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    whole = out[: out.rfind(b"\n") + 1]  # a line cut by the interrupt does not count
    numbers = [int(line.split()[1]) for line in whole.decode().splitlines()]
    assert len(numbers) > 20, (out[-300:], err)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
