"""Compose's network settings beyond names and aliases (issue 16): `links`, a service's
endpoint options (`ipv4_address`, `ipv6_address`, `link_local_ips`, `priority`), a
network's `ipam` (with `options` and each pool's `aux_addresses`, as docker-compose
1.29.2 sends them) and `enable_ipv6`, and `network_mode: service:NAME | container:NAME`.

- `links: [db, "db:database"]`: the linking container resolves `database` (and `db`) to
  the linked service's replicas, through its own endpoints' links as the engine keeps
  them (`db:database`: the target is the service name, an alias every replica of `db`
  carries, so the link survives a heal of `db`; Compose names the one container it saw).
  Like Compose, a link makes the linked service a dependency (service_started).
- `priority`: networks are joined in decreasing priority (the first is the one the
  container is created on), then by name, as Compose orders them.
- A fixed `ipv4_address` (or `ipv6_address`) allows one replica only, and the engine
  takes one only on a network with a declared subnet: on a network this file declares,
  that is checked here.
- `network_mode: service:NAME` joins the network namespace of a running container of
  service NAME of this file (a dependency too); `container:NAME` a named container.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.values import boolean, whole
from healerd.config.yamlload import LineDict, LineList
from healerd.model import Dependency, IpamPool, NetworkDecl, NetworkEndpoint, ServiceSpec

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_SERVICE_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_CONTAINER_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
# What the engine refuses beside a container's network namespace ("conflicting options").
_NOT_WITH_SHARED_NETWORK = (
    "ports", "expose", "hostname", "dns", "dns_search", "dns_opt", "extra_hosts", "links",
)  # fmt: skip


def links(value: object, at: At) -> tuple[tuple[str, str], ...]:
    """`SERVICE` or `SERVICE:ALIAS` entries -> (service, alias) pairs, in order."""
    if not isinstance(value, LineList):
        at.error(f"must be a list of SERVICE or SERVICE:ALIAS, not {describe(value)}")
        return ()
    out: list[tuple[str, str]] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        service, _, alias = item.partition(":") if isinstance(item, str) else ("", "", "")
        alias = alias or service
        if not (_SERVICE_RE.fullmatch(service) and _SERVICE_RE.fullmatch(alias)):
            item_at.error(f"{item!r} is not SERVICE or SERVICE:ALIAS")
        elif any(a == alias for _, a in out):
            item_at.error(f"alias {alias!r} is linked twice")
        else:
            out.append((service, alias))
    return tuple(out)


def network_mode(mode: str, at: At) -> str | None:
    """service:NAME and container:NAME (the rest is healerd.config.hostchecks')."""
    kind, _, name = mode.partition(":")
    pattern = _SERVICE_RE if kind == "service" else _CONTAINER_RE
    if not pattern.fullmatch(name):
        at.error(f"{mode!r}: {kind}:NAME needs the name of a {kind}")
        return None
    return mode


def _address(value: object, version: int, at: At) -> str:
    try:
        ip = ipaddress.ip_address(str(value)) if isinstance(value, str) else None
    except ValueError:
        ip = None
    if ip is None or ip.version != version:
        at.error(f"{value!r} is not an IPv{version} address")
        return ""
    return str(ip)


def _in_pools(ip: str, decl: NetworkDecl | None, key: str, at: At) -> None:
    """A declared network must have a subnet that holds a fixed address."""
    if decl is None or not ip:
        return  # an external network, or one this file does not declare: the engine's say
    address = ipaddress.ip_address(ip)
    subnets = [ipaddress.ip_network(p.subnet) for p in decl.ipam_pools if p.subnet]
    if not any(s.version == address.version for s in subnets):
        at.error(
            f"network {key!r} declares no IPv{address.version} subnet (ipam.config.subnet): "
            "the engine takes a fixed address only on a network with a declared subnet"
        )
    elif not any(address in s for s in subnets):
        at.error(f"{ip} is in none of network {key!r}'s subnets")


def _link_local(value: object, at: At) -> tuple[str, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of IP addresses, not {describe(value)}")
        return ()
    out = []
    for index, item in enumerate(value):
        try:
            out.append(str(ipaddress.ip_address(str(item))))
        except ValueError:
            at.item(value, index).error(f"{item!r} is not an IP address")
    return tuple(out)


def endpoint(
    options: object, key: str, name: str, decl: NetworkDecl | None, at: At
) -> tuple[NetworkEndpoint | None, int]:
    """The endpoint settings (None: none) and the priority a service gives network `key`
    (engine name `name`) under its `networks:`; `at` is that network's entry."""
    if not isinstance(options, LineDict):
        return None, 0
    ipv4 = ipv6 = ""
    if options.get("ipv4_address") is not None:
        ipv4 = _address(options["ipv4_address"], 4, at.key(options, "ipv4_address"))
        _in_pools(ipv4, decl, key, at.key(options, "ipv4_address"))
    if options.get("ipv6_address") is not None:
        ipv6 = _address(options["ipv6_address"], 6, at.key(options, "ipv6_address"))
        if decl is not None and not decl.enable_ipv6 and ipv6:
            at.key(options, "ipv6_address").error(f"network {key!r} has no enable_ipv6: true")
        _in_pools(ipv6, decl, key, at.key(options, "ipv6_address"))
    local: tuple[str, ...] = ()
    if options.get("link_local_ips") is not None:
        local = _link_local(options["link_local_ips"], at.key(options, "link_local_ips"))
    priority = 0
    if options.get("priority") is not None:
        priority = whole(
            options["priority"], at.key(options, "priority"), minimum=-(2**31), default=0
        )
    if not (ipv4 or ipv6 or local):
        return None, priority
    return NetworkEndpoint(name, ipv4, ipv6, local), priority


def service_endpoint(
    body: LineDict, key: str, name: str, decl: NetworkDecl | None, at: At
) -> tuple[NetworkEndpoint | None, int]:
    """`endpoint` of the service `body` (at `at`) for its network `key`."""
    nets = body.get("networks")
    if not isinstance(nets, LineDict) or not isinstance(nets.get(key), LineDict):
        return None, 0
    return endpoint(nets[key], key, name, decl, at.key(body, "networks").key(nets, key))


def _pool(item: object, at: At) -> IpamPool | None:
    if not isinstance(item, LineDict):
        at.error(f"must be a mapping with subnet, not {describe(item)}")
        return None
    values: dict[str, str] = {}
    for option in item:
        option_at = at.key(item, option)
        if option == "aux_addresses":
            continue  # once the subnet is known
        if option not in ("subnet", "ip_range", "gateway"):
            option_at.error(
                f"{option!r} is not supported (subnet, ip_range, gateway, aux_addresses)"
            )
            continue
        text = item[option]
        try:
            if option == "gateway":
                values[option] = str(ipaddress.ip_address(str(text)))
            else:
                values[option] = str(ipaddress.ip_network(str(text)))
        except ValueError:
            what = "an IP address" if option == "gateway" else "a network such as 10.5.0.0/16"
            option_at.error(f"{text!r} is not {what}")
    if "subnet" not in values:
        if "subnet" not in item:
            at.here("subnet").error("is required")
        return None
    subnet = ipaddress.ip_network(values["subnet"])
    for option in ("ip_range", "gateway"):
        inside = values.get(option)
        if inside is None:
            continue
        net = ipaddress.ip_network(inside)
        if net.version != subnet.version or not net.subnet_of(subnet):  # type: ignore[arg-type]
            at.key(item, option).error(f"{inside} is not inside subnet {subnet}")
    aux = (
        _aux(item["aux_addresses"], subnet, at.key(item, "aux_addresses"))
        if item.get("aux_addresses") is not None
        else ()
    )
    return IpamPool(values["subnet"], values.get("ip_range", ""), values.get("gateway", ""), aux)


def _aux(value: object, subnet: IpNetwork, at: At) -> tuple[tuple[str, str], ...]:
    """`aux_addresses`: addresses of the subnet that the engine keeps for hosts outside
    it (a router, a printer on a macvlan), by name."""
    if not isinstance(value, LineDict):
        at.error(f"must map host names to addresses, not {describe(value)}")
        return ()
    out = []
    for host, address in value.items():
        host_at = at.key(value, host)
        try:
            ip = ipaddress.ip_address(str(address)) if isinstance(address, str) else None
        except ValueError:
            ip = None
        if not isinstance(host, str) or not host:
            host_at.error(f"{host!r} is not a host name")
        elif ip is None or ip not in subnet:
            host_at.error(f"{address!r} is not an address inside subnet {subnet}")
        else:
            out.append((host, str(ip)))
    return tuple(sorted(out))


def _ipam(value: object, at: At) -> tuple[str, tuple[IpamPool, ...]]:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with driver and config, not {describe(value)}")
        return "", ()
    for option in value:
        if option not in ("driver", "config", "options"):
            at.key(value, option).error(f"{option!r} is not supported (driver, config, options)")
    driver = value.get("driver") or ""
    if not isinstance(driver, str):
        at.key(value, "driver").error(f"must be a string, not {describe(driver)}")
        driver = ""
    config = value.get("config") or LineList()
    if not isinstance(config, LineList):
        at.key(value, "config").error(f"must be a list of pools, not {describe(config)}")
        return driver, ()
    config_at = at.key(value, "config")
    pools = [_pool(item, config_at.item(config, i)) for i, item in enumerate(config)]
    return driver, tuple(p for p in pools if p is not None)


def network_options(decl: NetworkDecl, body: LineDict, at: At) -> NetworkDecl:
    """A declared network's `ipam` and `enable_ipv6`."""
    enable_ipv6 = decl.enable_ipv6
    if "enable_ipv6" in body:
        enable_ipv6 = boolean(body["enable_ipv6"], at.key(body, "enable_ipv6"))
    driver = ""
    pools: tuple[IpamPool, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    if body.get("ipam") is not None:
        driver, pools = _ipam(body["ipam"], at.key(body, "ipam"))
        ipam = body["ipam"]
        if isinstance(ipam, LineDict) and ipam.get("options") is not None:
            options = _ipam_options(ipam["options"], at.key(body, "ipam").key(ipam, "options"))
    return dataclasses.replace(
        decl, enable_ipv6=enable_ipv6, ipam_driver=driver, ipam_pools=pools, ipam_options=options
    )


def _ipam_options(value: object, at: At) -> tuple[tuple[str, str], ...]:
    """The IPAM driver's options, text as Compose's schema has them."""
    if not isinstance(value, LineDict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        at.error(f"must map option names to text, not {describe(value)}")
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))


def _shared_network(spec: ServiceSpec, body: LineDict, at: At) -> None:
    for key in _NOT_WITH_SHARED_NETWORK:
        if body.get(key):
            at.key(body, key).error(
                f"cannot be combined with network_mode {spec.network_mode}: the container "
                "joins another container's network namespace (the engine refuses both)"
            )


def across_keys(spec: ServiceSpec, body: LineDict, at: At) -> None:
    """What these settings forbid together with others of the same service."""
    if spec.network_mode and spec.network_mode.startswith(("service:", "container:")):
        _shared_network(spec, body, at)
    nets = body.get("networks")
    if spec.replicas <= 1 or not isinstance(nets, LineDict):
        return
    for key, options in nets.items():
        if isinstance(options, LineDict):
            for field in ("ipv4_address", "ipv6_address"):
                if options.get(field) is not None:
                    at.key(body, "networks").key(nets, key).key(options, field).error(
                        f"a fixed address allows only one replica (replicas is {spec.replicas}):"
                        " two containers cannot share an address"
                    )


def _implied(spec: ServiceSpec) -> tuple[str, ...]:
    names = [service for service, _ in spec.links]
    if spec.network_mode and spec.network_mode.startswith("service:"):
        names.append(spec.network_mode.removeprefix("service:"))
    return tuple(names)


def implied_dependencies(
    specs: Mapping[str, ServiceSpec], bodies: Mapping[str, tuple[LineDict, At]]
) -> dict[str, ServiceSpec]:
    """Each service a service links to or shares the network of must be declared in this
    file, and becomes a dependency (service_started) unless depends_on names it. Two
    services of the file cannot hold one fixed address on one network."""
    out = dict(specs)
    held: dict[tuple[str, str], str] = {}
    for name, spec in specs.items():
        body, at = bodies[name]
        for e in spec.network_endpoints:
            for ip in filter(None, (e.ipv4_address, e.ipv6_address)):
                other = held.setdefault((e.network, ip), name)
                if other != name:
                    at.key(body, "networks").error(
                        f"{ip} on {e.network} is also service {other!r}'s: two containers "
                        "cannot hold one address"
                    )
        added: list[Dependency] = []
        for service in _implied(spec):
            key = "links" if service in dict(spec.links) else "network_mode"
            if service == name:
                at.key(body, key).error(f"service {name!r} cannot use itself here")
            elif service not in specs:
                at.key(body, key).error(
                    f"names service {service!r}, which this file does not declare"
                )
            elif all(d.service != service for d in (*spec.depends_on, *added)):
                added.append(Dependency(service))
        if added:
            deps = tuple(sorted((*spec.depends_on, *added), key=lambda d: d.service))
            out[name] = dataclasses.replace(spec, depends_on=deps)
    return out
