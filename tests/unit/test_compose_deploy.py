"""Compose's deploy, scale and gpus (issue 16): spellings of healerd's own settings on one
engine; two spellings that disagree are an error; what needs a Swarm is refused, saying
why; GPUs become the engine's DeviceRequests."""

from __future__ import annotations

import logging
import textwrap

import pytest

from healerd.config import parse_service_text
from healerd.engine.docker.request import host_options
from healerd.model import DeviceRequest, RestartPolicy, ServiceSpec, UpdateConfig, UpdateOrder


def load(body: str) -> ServiceSpec:
    text = "services:\n  web:\n    image: busybox\n" + textwrap.indent(
        textwrap.dedent(body), "    "
    )
    result = parse_service_text(text, "stack.yaml", env={})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services["web"]


def errors(body: str) -> list[str]:
    text = "services:\n  web:\n    image: busybox\n" + textwrap.indent(
        textwrap.dedent(body), "    "
    )
    return [str(e) for e in parse_service_text(text, "stack.yaml", env={}).errors]


def test_deploy_spells_replicas_rollout_backoff_and_resources() -> None:
    web = load(
        """\
        deploy:
          mode: replicated
          replicas: 3
          update_config: {parallelism: 2, order: stop-first, delay: 5s}
          restart_policy: {condition: any, delay: 2s, window: 1m}
          resources:
            limits: {cpus: "0.5", memory: 256m, pids: 100}
            reservations: {memory: 64m}
        """
    )
    assert web.replicas == 3
    assert web.update_config == UpdateConfig(parallelism=2, delay=5.0, order=UpdateOrder.STOP_FIRST)
    assert web.restart_policy == RestartPolicy(delay=2.0, window=60.0)
    assert (web.cpus, web.mem_limit, web.pids_limit) == (0.5, 256 << 20, 100)
    assert web.mem_reservation == 64 << 20


def test_deploy_gives_the_spec_the_direct_spelling_gives() -> None:
    direct = load("replicas: 2\ncpus: 0.5\nmem_limit: 256m\npids_limit: 100\n")
    spelled = load(
        "deploy: {replicas: 2, resources: {limits: {cpus: 0.5, memory: 256m, pids: 100}}}"
    )
    assert direct == spelled and direct.spec_hash == spelled.spec_hash
    assert load("scale: 2\n") == load("replicas: 2\n")


def test_two_spellings_that_agree_are_fine() -> None:
    web = load("replicas: 2\nscale: 2\nmem_limit: 64m\n"
               "deploy: {replicas: 2, resources: {limits: {memory: 64m}}}\n")  # fmt: skip
    assert (web.replicas, web.mem_limit) == (2, 64 << 20)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "replicas: 2\ndeploy: {replicas: 3}\n",
            "stack.yaml:5:14: services.web.deploy.replicas: deploy.replicas and replicas are one "
            "setting and disagree (3 vs 2): write it once",
        ),
        ("replicas: 2\nscale: 3\n", "services.web.scale: scale and replicas are one setting"),
        (
            "mem_limit: 64m\ndeploy: {resources: {limits: {memory: 128m}}}\n",
            "services.web.deploy.resources.limits.memory: deploy.resources.limits.memory and "
            "mem_limit are one setting and disagree",
        ),
        (
            "restart_policy: {delay: 1s}\ndeploy: {restart_policy: {delay: 2s}}\n",
            "deploy.restart_policy: deploy.restart_policy and restart_policy are one setting",
        ),
        ("deploy: {mode: global}\n", "4:14: services.web.deploy.mode: 'global' is not supported"),
        (
            "deploy: {placement: {constraints: []}}\n",
            "deploy.placement: is not supported: it places",
        ),
        ("deploy: {endpoint_mode: dnsrr}\n", "deploy.endpoint_mode: is not supported: it chooses"),
        ("deploy: {rollback_config: {}}\n", "deploy.rollback_config: is not supported: it rolls"),
        ("deploy: {replica: 2}\n", "services.web.deploy.replica: unknown key 'replica'"),
        ("deploy: {replicas: -1}\n", "services.web.deploy.replicas: must not be negative"),
        ("deploy: 3\n", "services.web.deploy: must be a mapping"),
        ("deploy: {resources: {limits: {memory: 1k}}}\n", "limits.memory: must be at least 6m"),
        ("deploy: {resources: {limits: {cpus: none}}}\n", "limits.cpus: must be a number of CPUs"),
        ("deploy: {resources: {limits: {pids: -5}}}\n", "limits.pids: must be at least -1"),
        ("deploy: {resources: {limits: {gpus: 1}}}\n", "limits.gpus: unknown key 'gpus'"),
        ("deploy: {resources: {reservations: {cpus: 1}}}\n", "reservations.cpus: is not supported"),
        ("deploy: {resources: {requests: {}}}\n", "resources.requests: unknown key 'requests'"),
        ("deploy: {restart_policy: {condition: never}}\n", "condition: 'never' is not any, none"),
        ("deploy: {restart_policy: {max_attempts: 3}}\n", "max_attempts: goes with condition: on-"),
        ("deploy: {update_config: {parallelism: 0}}\n", "update_config.parallelism: must be at"),
        ("scale: two\n", "services.web.scale: must be a whole number"),
        ("gpus: some\n", "services.web.gpus: must be all or a list of devices"),
        ("gpus: [{count: 0}]\n", "services.web.gpus[0].count: must be a number of devices or all"),
        ("gpus: [{count: 1, device_ids: ['0']}]\n", "gpus[0].count: cannot be combined with"),
        (
            "deploy: {resources: {reservations: {devices: [{count: 1}]}}}\n",
            "reservations.devices[0].capabilities: is required",
        ),
    ],
)
def test_a_wrong_deploy_is_refused_with_file_line_and_field(body: str, message: str) -> None:
    found = errors(body)
    assert any(message in e for e in found), found


def test_deploy_labels_are_accepted_not_applied_and_said_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "healerd.config"):
        web = load("deploy: {labels: {tier: web}}\n")
    assert web.labels == () and web == load("")
    assert any("deploy.labels" in r.getMessage() for r in caplog.records)


def test_gpus_and_reserved_devices_become_device_requests() -> None:
    web = load(
        """\
        gpus: all
        deploy:
          resources:
            reservations:
              devices:
                - {driver: nvidia, device_ids: ["0", "1"], capabilities: [gpu, utility]}
                - {capabilities: [tpu], count: 2, options: {x: "1"}}
        """
    )
    assert web.device_requests == (
        DeviceRequest(count=-1, capabilities=("gpu",)),
        DeviceRequest("nvidia", None, ("0", "1"), ("gpu", "utility")),
        DeviceRequest("", 2, (), ("tpu",), (("x", "1"),)),
    )
    assert host_options(web)["device_requests"] == [
        {"driver": "", "count": -1, "device_ids": None, "capabilities": [["gpu"]], "options": None},
        {"driver": "nvidia", "count": 0, "device_ids": ["0", "1"],
         "capabilities": [["gpu", "utility"]], "options": None},
        {"driver": "", "count": 2, "device_ids": None, "capabilities": [["tpu"]],
         "options": {"x": "1"}},
    ]  # fmt: skip
    gpu = load("gpus: [{count: 1}]\n")
    assert gpu.device_requests == (DeviceRequest(count=1, capabilities=("gpu",)),)


def test_the_sdk_takes_the_device_requests() -> None:
    docker = pytest.importorskip("docker")
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    config = api.create_host_config(**host_options(load("gpus: all\n")))
    assert config["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
