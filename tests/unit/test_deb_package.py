"""The .deb (packaging/build-deb) installs with each supported Debian release's own
packages (issue 31, item 4): its Depends are met by Debian 12's and Debian 13's
versions, its floors are the ones the code was checked against, and its files are
where Debian 13's merged /usr wants them. packaging/test-systemd.sh installs and runs it
on both releases; this is the fast check of the same promises."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

from healerd.engine.docker import sdk

REPO = Path(__file__).resolve().parents[2]

# What each release installs (as debootstrap gave them to packaging/test-systemd.sh's
# images, December 2026).
RELEASES = {
    "bookworm": {
        "python3": "3.11.2-1+b1",
        "python3-docker": "5.0.3-1",
        "python3-yaml": "6.0-3+b2",
        "python3-psutil": "5.9.4-1+b1",
        "python3-systemd": "235-1+b2",
        "python3-prometheus-client": "0.16.0-0.1",
        "apprise": "1.2.0-1",
        "python3-zstandard": "0.20.0-3",
        "init-system-helpers": "1.65.2+deb12u1",
        "adduser": "3.134",
    },
    "trixie": {
        "python3": "3.13.5-1",
        "python3-docker": "7.1.0-2",
        "python3-yaml": "6.0.2-1+b2",
        "python3-psutil": "7.0.0-2",
        "python3-systemd": "235-1+b6",
        "python3-prometheus-client": "0.21.1+ds1-1",
        "apprise": "1.9.3-1",
        "python3-zstandard": "0.23.0-4",
        "init-system-helpers": "1.69~deb13u1",
        "adduser": "3.152",
    },
}
RELATION = re.compile(r"^([a-z0-9.+-]+)(?: \((>=|<=|=|<<|>>) ([^)]+)\))?$")

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="no dpkg-deb")


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run(
        ["bash", str(REPO / "packaging" / "build-deb")],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HEALERD_DEB_DIR": str(out)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def depends(deb: Path, field_name: str = "Depends") -> dict[str, tuple[str, str] | None]:
    field = subprocess.run(
        ["dpkg-deb", "-f", str(deb), field_name], capture_output=True, text=True, check=True
    ).stdout
    relations: dict[str, tuple[str, str] | None] = {}
    for item in field.split(","):
        match = RELATION.match(item.strip())
        assert match, f"a {field_name} item this test cannot read: {item.strip()!r}"
        name, op, version = match.groups()
        relations[name] = (op, version) if op else None
    return relations


@needs_dpkg
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_each_release_meets_every_dependency_with_its_own_packages(deb: Path, release: str) -> None:
    have = RELEASES[release]
    for name, relation in depends(deb).items():
        assert name in have, f"{name}: not known for {release} here; add its version"
        if relation is None:
            continue
        op, version = relation
        met = subprocess.run(["dpkg", "--compare-versions", have[name], op, version], check=False)
        assert met.returncode == 0, f"{release}'s {name} {have[name]} is not {op} {version}"


@needs_dpkg
def test_the_floors_are_the_ones_the_code_was_checked_against(deb: Path) -> None:
    relations = depends(deb)
    python = relations["python3"]
    docker = relations["python3-docker"]
    assert python is not None and docker is not None
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert (">=", requires.removeprefix(">=")) == python
    assert docker[0] == ">="
    floor = tuple(int(part) for part in docker[1].split(".")[:2])
    assert floor == min(sdk.CHECKED_SDK), (docker, sdk.CHECKED_SDK)


@needs_dpkg
def test_notifications_use_debians_apprise(deb: Path) -> None:
    """Apprise is Debian's package on both releases (none shipped inside), with the
    floor pyproject.toml states (Debian 12's 1.2.0); MQTT targets need paho, recommended."""
    apprise = depends(deb).get("apprise")
    assert apprise == (">=", "1.2.0"), "Depends must name apprise (notifications)"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "apprise>=1.2" in requires
    assert "python3-paho-mqtt" in depends(deb, "Recommends")


@needs_dpkg
def test_files_are_under_usr_as_on_a_merged_usr_system(deb: Path) -> None:
    listing = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    names = subprocess.run(
        ["tar", "-t"], input=listing, capture_output=True, check=True
    ).stdout.decode()
    paths = [line.removeprefix("./").rstrip("/") for line in names.splitlines()]
    aliased = [p for p in paths if p.split("/")[0] in {"lib", "lib64", "bin", "sbin"}]
    assert aliased == [], "Debian 13 (DEP 17): ship these under /usr"
    assert "usr/lib/systemd/system/healerd.service" in paths


@needs_dpkg
def test_healerd_yaml_is_not_readable_by_others(deb: Path) -> None:
    """It may come to hold notification URLs with credentials (healerd refuses it readable
    by others then): shipped 0640 root:root; postinst gives it to group healerd at the
    first install."""
    listing = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(listing)) as tar:
        member = tar.getmember("./etc/healerd/healerd.yaml")
    assert member.mode == 0o640, oct(member.mode)
    assert (member.uname, member.gname) == ("root", "root")
    postinst = (REPO / "packaging" / "debian" / "postinst").read_text()
    assert "chgrp healerd /etc/healerd/healerd.yaml" in postinst


@needs_dpkg
@pytest.mark.parametrize(
    ("shipped", "source"),
    [
        (
            "usr/share/healerd/prometheus/healerd.rules.yml",
            "packaging/prometheus/healerd.rules.yml",
        ),
        (
            "usr/share/healerd/grafana/healerd-dashboard.json",
            "packaging/grafana/healerd-dashboard.json",
        ),
    ],
)
def test_the_alerting_rules_and_the_dashboard_are_shipped(
    deb: Path, tmp_path: Path, shipped: str, source: str
) -> None:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    installed = tmp_path / shipped
    assert installed.read_bytes() == (REPO / source).read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o644
    # The rules' promtool test stays in the source: a rule_files glob over the
    # directory must find rules only.
    assert sorted(p.name for p in installed.parent.iterdir()) == [installed.name]


@needs_dpkg
def test_git_sources_tools_are_recommended(deb: Path) -> None:
    """healerd.yaml's `sources:` run Debian's git, whose SSH signature checks run
    ssh-keygen (openssh-client); OpenPGP signatures need gpg, suggested."""
    recommends = depends(deb, "Recommends")
    assert "git" in recommends and "openssh-client" in recommends
    assert "gpg" in depends(deb, "Suggests")
