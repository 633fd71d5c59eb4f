"""Merging service files into the desired state, with last-good memory per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from healerd.config import (
    DesiredStore,
    FileResult,
    is_config_name,
    list_config_files,
    load_conf_dir,
    parse_service_text,
)


def good(file: str, *names: str, image: str = "busybox:1") -> FileResult:
    body = "".join(f"  {n}:\n    image: {image}\n" for n in names)
    result = parse_service_text(f"services:\n{body}", file)
    assert result.services is not None
    return result


def broken(file: str) -> FileResult:
    result = parse_service_text("services:\n  web:\n    image: x\n    replica: 2\n", file)
    assert result.services is None
    return result


# --- directory listing ---------------------------------------------------------------


def test_list_config_files(tmp_path: Path) -> None:
    for name in ["b.yml", "a.yaml", "c.yaml", ".hidden.yaml", "notes.txt", "d.yaml~", "x.json"]:
        (tmp_path / name).write_text("")
    (tmp_path / "sub.yaml").mkdir()
    (tmp_path / "sub.yaml" / "inner.yaml").write_text("")
    assert [p.name for p in list_config_files(tmp_path)] == ["a.yaml", "b.yml", "c.yaml"]


def test_missing_directory_lists_nothing(tmp_path: Path) -> None:
    assert list_config_files(tmp_path / "missing") == []
    (tmp_path / "file").write_text("")
    assert list_config_files(tmp_path / "file") == []
    assert load_conf_dir(tmp_path / "missing") == []


def test_load_conf_dir_uses_full_paths(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("services:\n  web: {image: x}\n")
    (tmp_path / "a.yaml").write_text("services:\n  web: {}\n")
    results = load_conf_dir(tmp_path)
    assert [r.file for r in results] == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert results[0].services is None
    assert results[1].services is not None
    assert results[1].services["web"].source_file == str(tmp_path / "b.yaml")


# --- store rules ---------------------------------------------------------------------


def test_valid_files_are_merged() -> None:
    state = DesiredStore().update([good("a.yaml", "web", "db"), good("b.yaml", "cache")])
    assert sorted(state.services) == ["cache", "db", "web"]
    assert state.errors == ()
    assert state.broken_files == ()
    assert not state.hold_orphans


def test_rule1_a_valid_file_replaces_its_last_good_entry() -> None:
    store = DesiredStore()
    store.update([good("a.yaml", "web", "db")])
    state = store.update([good("a.yaml", "web", image="busybox:2")])
    assert list(state.services) == ["web"]
    assert state.services["web"].image == "busybox:2"


def test_rule2_an_invalid_file_keeps_its_last_good_services() -> None:
    store = DesiredStore()
    first = store.update([good("a.yaml", "web"), good("b.yaml", "db")])
    state = store.update([broken("a.yaml"), good("b.yaml", "db")])
    assert state.services == first.services
    assert state.broken_files == ("a.yaml",)
    assert [(e.file, e.line, e.field) for e in state.errors] == [
        ("a.yaml", 4, "services.web.replica")
    ]
    assert not state.hold_orphans
    fixed = store.update([good("a.yaml", "web"), good("b.yaml", "db")])
    assert fixed.broken_files == () and fixed.errors == ()


def test_rule3_an_invalid_file_never_seen_valid_holds_orphans() -> None:
    store = DesiredStore()
    state = store.update([broken("a.yaml"), good("b.yaml", "db")])
    assert list(state.services) == ["db"]
    assert state.hold_orphans
    assert state.broken_files == ("a.yaml",)
    assert state.errors
    assert not store.update([good("a.yaml", "web"), good("b.yaml", "db")]).hold_orphans


def test_rule4_a_removed_file_is_forgotten() -> None:
    store = DesiredStore()
    store.update([good("a.yaml", "web"), good("b.yaml", "db")])
    state = store.update([good("b.yaml", "db")])
    assert list(state.services) == ["db"]
    # It comes back broken: its old services are gone for good, so orphans are held.
    state = store.update([broken("a.yaml"), good("b.yaml", "db")])
    assert list(state.services) == ["db"]
    assert state.hold_orphans


def test_rule5_the_first_file_in_sorted_order_wins_a_name() -> None:
    store = DesiredStore()
    later = good("b.yaml", "web", "db", image="busybox:2")
    state = store.update([later, good("a.yaml", "web")])
    assert state.services["web"].image == "busybox:1"
    assert state.services["web"].source_file == "a.yaml"
    # The losing file is refused whole, like a file with an error: b's db never applies.
    assert "db" not in state.services
    assert len(state.errors) == 1
    error = state.errors[0]
    assert (error.file, error.line, error.column, error.field) == ("b.yaml", 2, 3, "services.web")
    assert "a.yaml" in error.reason and "b.yaml" in str(error)
    assert state.broken_files == ("b.yaml",)
    assert state.hold_orphans  # b.yaml was never good: db's containers must stay


def test_rule5_the_name_already_applied_keeps_it_whatever_the_file_order() -> None:
    store = DesiredStore()
    store.update([good("b.yaml", "web", "db", image="busybox:2")])
    state = store.update([good("a.yaml", "web"), good("b.yaml", "web", "db", image="busybox:2")])
    assert state.services["web"].source_file == "b.yaml"
    assert state.services["db"].source_file == "b.yaml"
    assert state.broken_files == ("a.yaml",)
    assert [(e.file, e.field) for e in state.errors] == [("a.yaml", "services.web")]
    assert "the one in b.yaml is used" in state.errors[0].reason


def test_rule5_a_refused_file_keeps_its_last_good_version() -> None:
    store = DesiredStore()
    store.update([good("a.yaml", "web"), good("b.yaml", "db")])
    state = store.update([good("a.yaml", "web"), good("b.yaml", "db", "web")])
    assert state.services["web"].source_file == "a.yaml"
    assert state.services["db"].source_file == "b.yaml"
    assert state.broken_files == ("b.yaml",)
    assert not state.hold_orphans


def test_rule5_applies_to_last_good_services_too() -> None:
    store = DesiredStore()
    store.update([good("a.yaml", "web")])
    state = store.update([broken("a.yaml"), good("b.yaml", "web", image="busybox:2")])
    assert state.services["web"].source_file == "a.yaml"
    assert [e.field for e in state.errors] == ["services.web.replica", "services.web"]


def test_empty_scan_forgets_everything() -> None:
    store = DesiredStore()
    store.update([good("a.yaml", "web")])
    state = store.update([])
    assert dict(state.services) == {}
    assert not state.hold_orphans


def test_services_mapping_is_read_only() -> None:
    state = DesiredStore().update([good("a.yaml", "web")])
    with pytest.raises(TypeError):
        state.services["x"] = state.services["web"]  # type: ignore[index]


def test_whole_flow_on_disk(tmp_path: Path) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "a.yaml").write_text("services:\n  web: {image: busybox:1, replicas: 2}\n")
    store = DesiredStore()
    assert store.update(load_conf_dir(conf)).services["web"].replicas == 2
    (conf / "a.yaml").write_text("services:\n  web: {image: busybox:1, replicas: two}\n")
    state = store.update(load_conf_dir(conf))
    assert state.services["web"].replicas == 2
    assert state.broken_files == (str(conf / "a.yaml"),)
    assert str(state.errors[0]).startswith(f"{conf / 'a.yaml'}:2:27: services.web.replicas:")
    (conf / "a.yaml").unlink()
    assert dict(store.update(load_conf_dir(conf)).services) == {}


# --- what system tools leave behind --------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        ".a.yaml",
        ".a.yaml.swp",
        ".#a.yaml",
        "a.yaml~",
        "#a.yaml#",
        "a.yaml.swp",
        "a.yaml.swx",
        "a.yaml.tmp",
        "a.yaml.bak",
        "a.yaml.orig",
        "a.yaml.dpkg-old",
        "a.yaml.dpkg-new",
        "a.yaml.dpkg-dist",
        "a.yaml.dpkg-tmp",
        "a.yaml.rpmnew",
        "a.yaml.rpmsave",
        "a.json",
        "README",
        ".yaml",
    ],
)
def test_leftovers_are_not_config_files(tmp_path: Path, name: str) -> None:
    assert not is_config_name(name)
    (tmp_path / name).write_text("services:\n  x: {image: busybox}\n")
    assert list_config_files(tmp_path) == []


@pytest.mark.parametrize("name", ["a.yaml", "a.yml", "10-web.yaml", "a.b.yaml"])
def test_config_names(name: str) -> None:
    assert is_config_name(name)


# --- fixed host ports across files ---------------------------------------------------


def ported(file: str, name: str, port: str = "8080:80", image: str = "busybox:1") -> FileResult:
    text = f"services:\n  {name}:\n    image: {image}\n    ports: ['{port}']\n"
    result = parse_service_text(text, file)
    assert result.services is not None
    return result


def test_a_host_port_across_files_refuses_the_later_file_naming_both() -> None:
    state = DesiredStore().update([ported("b.yaml", "web2"), ported("a.yaml", "web")])
    assert list(state.services) == ["web"]
    assert state.broken_files == ("b.yaml",)
    [error] = state.errors
    assert (error.file, error.line, error.column, error.field) == ("b.yaml", 2, 3, "services.web2")
    assert "host port 8080/tcp is also published by service 'web' in a.yaml" in error.reason
    assert state.hold_orphans


def test_the_service_holding_a_port_keeps_it_whatever_the_file_order() -> None:
    store = DesiredStore()
    store.update([ported("b.yaml", "web2"), good("a.yaml", "web")])
    # a.yaml's web now wants the port b.yaml's web2 holds: a.yaml is refused, web stays as it was.
    state = store.update([ported("b.yaml", "web2"), ported("a.yaml", "web", image="busybox:2")])
    assert state.services["web"].ports == ()
    assert state.services["web2"].ports[0].host_port == 8080
    assert state.broken_files == ("a.yaml",)
    assert not state.hold_orphans
    assert "also published by service 'web2' in b.yaml" in state.errors[0].reason


def test_different_host_ports_across_files_are_fine() -> None:
    state = DesiredStore().update([ported("a.yaml", "web"), ported("b.yaml", "web2", "8081:80")])
    assert sorted(state.services) == ["web", "web2"]
    assert state.errors == ()


# --- after a restart: what runs settles conflicts, not the file order --------------------


def runs(result: FileResult, name: str, *, label: bool = True) -> tuple[str, str, str]:
    """A container found at start: (service, source-file label, spec hash)."""
    assert result.services is not None
    spec = result.services[name]
    return (name, spec.source_file if label else "", spec.spec_hash)


def test_after_a_restart_the_declaration_that_runs_keeps_its_name() -> None:
    a, b = good("a.yaml", "web", "cache"), good("b.yaml", "web", "db", image="busybox:2")
    # Live: b.yaml came first and a.yaml was refused; then healerd restarted.
    for label in (True, False):  # by its source-file label, or (older containers) its hash
        store = DesiredStore()
        store.prefer_running([runs(b, "web", label=label), ("db", "", "x")])
        state = store.update([a, b])
        assert state.services["web"].source_file == "b.yaml"
        assert sorted(state.services) == ["db", "web"]  # a.yaml refused whole, as before
        assert state.broken_files == ("a.yaml",)
        assert "the one in b.yaml is used" in state.errors[0].reason
    # Without containers (or when the engine could not be listed), name order decides.
    fresh = DesiredStore()
    fresh.prefer_running([])
    assert fresh.update([a, b]).services["web"].source_file == "a.yaml"


def test_the_preference_for_what_runs_holds_for_the_first_merge_only() -> None:
    a, b = good("a.yaml", "web"), good("b.yaml", "web", image="busybox:2")
    store = DesiredStore()
    store.prefer_running([runs(b, "web")])
    assert store.update([]).services == {}  # first merge: web not declared at all
    # From then on nothing is "held" by what ran at start: name order, as on a live add.
    assert store.update([a, b]).services["web"].source_file == "a.yaml"


def test_declarations_with_the_same_hash_are_told_apart_by_the_source_file_label() -> None:
    # Same container spec, other replicas: one hash. The file that was applied wins.
    # (One project name in both: another project would be another default network.)
    z = parse_service_text(
        "name: p\nservices:\n  web:\n    image: busybox:1\n    replicas: 2\n  other:\n"
        "    image: busybox:1\n",
        "z.yaml",
    )
    a = parse_service_text(
        "name: p\nservices:\n  web:\n    image: busybox:1\n    replicas: 5\n  extra:\n"
        "    image: busybox:1\n",
        "a.yaml",
    )
    assert z.services and a.services
    assert z.services["web"].spec_hash == a.services["web"].spec_hash
    store = DesiredStore()
    store.prefer_running([runs(z, "web"), runs(z, "other")])
    state = store.update([a, z])
    assert state.services["web"].replicas == 2 and sorted(state.services) == ["other", "web"]
    assert state.broken_files == ("a.yaml",)
    # The applied file edited while healerd was down matches no hash: its label decides.
    z2 = parse_service_text("services:\n  web:\n    image: busybox:3\n", "z.yaml")
    store = DesiredStore()
    store.prefer_running([runs(z, "web")])
    assert store.update([a, z2]).services["web"].image == "busybox:3"


def test_after_a_restart_the_service_that_runs_keeps_its_host_port() -> None:
    a, b = ported("a.yaml", "web"), ported("b.yaml", "web2")
    store = DesiredStore()
    store.prefer_running([runs(b, "web2")])
    state = store.update([a, b])
    assert list(state.services) == ["web2"]
    assert state.broken_files == ("a.yaml",)
    assert "also published by service 'web2' in b.yaml" in state.errors[0].reason
