"""`healerctl export --to kubernetes`: per service a Deployment, or a Job for a
run-once service (`restart: "no"` or `on-failure[:N]`: its containers may finish, which
a Deployment would restart for ever); a Service for each service another one reaches by
name or that listens (healerd.cli.export.kubeservice); and (only with
--include-secrets) a Secret with its env file values and the values that came from
`${VAR}`s, which the pod reads through `secretKeyRef` (healerd.cli.export.variables).
One multi-document YAML.

Volumes: an anonymous volume becomes an emptyDir (scratch space that lives as long as
the pod, as an anonymous volume lives as long as its container line); an absolute host
path a hostPath (the data stays on whichever node runs the pod); a named volume a
PersistentVolumeClaim, since a named volume is data that must outlive the containers,
which in Kubernetes is a claim on storage rather than a directory of one node.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import replace
from typing import Any

from healerd.cli.export.attachments import kubernetes_losses
from healerd.cli.export.common import (
    Loss,
    Options,
    Rendered,
    changed,
    dump,
    header,
    mount_options,
    user_networks,
    whole_seconds,
)
from healerd.cli.export.hostopts import kubernetes_fields, order_lost
from healerd.cli.export.kubeservice import (
    depended_on,
    exposed_ports,
    k8s_name,
    labels,
    service,
    wants_service,
)
from healerd.cli.export.variables import KubernetesVars, argv_warnings
from healerd.model import HealthcheckSpec, PullPolicy, ServiceSpec, UpdateOrder, VolumeSpec
from healerd.vocabulary import RestartMode, VolumeKind

LOST = {
    "priority": "needs a PriorityClass; set spec.template.spec.priorityClassName yourself",
    "unhealthy_grace": "the livenessProbe restarts after failureThreshold failures",
    "update_config.delay": "a Deployment has no pause between batches",
    "restart_policy.delay": "Kubernetes' CrashLoopBackOff is fixed: 10s doubling to 5m",
    "restart_policy.max_delay": "Kubernetes' CrashLoopBackOff is fixed: 10s doubling to 5m",
    "restart_policy.window": "Kubernetes resets the backoff after 10m of running",
}
# A Job runs its pods once and is never rolled: these say nothing there.
_ROLLOUT = (
    "update_config.parallelism",
    "update_config.order",
    "update_config.min_ready_seconds",
    "update_config.progress_deadline",
)
# A built image (pull_policy build) is pulled from where it was pushed, when missing.
PULL = {
    PullPolicy.ALWAYS: "Always",
    PullPolicy.MISSING: "IfNotPresent",
    PullPolicy.NEVER: "Never",
    PullPolicy.BUILD: "IfNotPresent",
}
PVC_COMMENT = """\
# A named volume: data that must outlive the containers, so a PersistentVolumeClaim.
# ReadWriteOnce binds it to one node at a time: with replicas > 1 spread over nodes, use
# a storage class that offers ReadWriteMany. 1Gi is a placeholder: size it for your data.
"""


def _meta(spec: ServiceSpec, name: str) -> dict[str, Any]:
    return {"name": name, "labels": labels(spec)}


def probe(hc: HealthcheckSpec | None, kv: KubernetesVars | None = None) -> dict[str, Any] | None:
    """Docker's healthcheck as an exec probe; Docker's defaults where a field is unset."""
    if hc is None or hc.disable or not hc.test or hc.test[0] == "NONE":
        return None
    if hc.test[0] == "CMD":
        command = list(hc.test[1:])  # an exec probe: Kubernetes expands nothing there
    else:
        command = ["/bin/sh", "-c", kv.shell(hc.test[1]) if kv else hc.test[1]]
    return {
        "exec": {"command": command},
        "periodSeconds": whole_seconds(hc.interval if hc.interval is not None else 30.0),
        "timeoutSeconds": whole_seconds(hc.timeout if hc.timeout is not None else 30.0),
        "failureThreshold": hc.retries if hc.retries is not None else 3,
        "initialDelaySeconds": whole_seconds(hc.start_period or 0.0),
    }


def strategy(spec: ServiceSpec) -> dict[str, Any]:
    n = spec.update_config.parallelism
    if spec.update_order == UpdateOrder.START_FIRST:
        rolling = {"maxSurge": n, "maxUnavailable": 0}
    else:
        rolling = {"maxSurge": 0, "maxUnavailable": n}
    return {"type": "RollingUpdate", "rollingUpdate": rolling}


def _security(spec: ServiceSpec, losses: list[Loss]) -> dict[str, Any] | None:
    if spec.user is None:
        return None
    user, _, group = spec.user.partition(":")
    if not user.isdigit() or (group and not group.isdigit()):
        losses.append(Loss(spec.name, "user", f"{spec.user}: runAsUser takes numeric ids only"))
        return None
    sc: dict[str, Any] = {"runAsUser": int(user)}
    if group:
        sc["runAsGroup"] = int(group)
    return sc


def _quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity (64Mi; a bare number is bytes)."""
    for unit, scale in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _volume(v: VolumeSpec, name: str) -> dict[str, Any]:
    if v.kind is VolumeKind.TMPFS:
        empty = {"medium": "Memory"}
        if v.tmpfs_size:
            empty["sizeLimit"] = _quantity(v.tmpfs_size)
        return {"name": name, "emptyDir": empty}
    if not v.source:
        return {"name": name, "emptyDir": {}}
    if v.source.startswith("/"):
        return {"name": name, "hostPath": {"path": v.source}}
    return {"name": name, "persistentVolumeClaim": {"claimName": k8s_name(v.source)}}


def _mount_losses(spec: ServiceSpec, v: VolumeSpec, losses: list[Loss]) -> None:
    """Mount options a pod cannot carry per mount."""
    lost = []
    if v.selinux:
        lost.append(f"{v.selinux}: Kubernetes relabels through the pod's seLinuxOptions")
    if v.propagation in ("shared", "rshared") and not spec.privileged:
        lost.append(f"{v.propagation}: Bidirectional propagation needs a privileged container")
    if v.tmpfs_mode is not None:
        lost.append(f"tmpfs mode {v.tmpfs_mode:o}: an emptyDir has no mode")
    if not v.create_host_path:
        lost.append("create_host_path: false: give the hostPath a type (Directory, File)")
    if v.recursive:
        lost.append(f"recursive: {v.recursive}: see the volumeMount's recursiveReadOnly")
    losses += [Loss(spec.name, "volumes", f"{v.target}: {reason}") for reason in lost]


def _volumes(
    spec: ServiceSpec, losses: list[Loss]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for i, v in enumerate(map(mount_options, spec.volumes)):
        name = f"vol-{i}"
        volumes.append(_volume(v, name))
        mount: dict[str, Any] = {"name": name, "mountPath": v.target}
        if v.read_only:
            mount["readOnly"] = True
        if v.propagation in ("slave", "rslave"):
            mount["mountPropagation"] = "HostToContainer"
        elif v.propagation in ("shared", "rshared") and spec.privileged:
            mount["mountPropagation"] = "Bidirectional"
        _mount_losses(spec, v, losses)
        mounts.append(mount)
    return volumes, mounts


def _ports(spec: ServiceSpec) -> list[dict[str, Any]]:
    """Published ports (hostPort if fixed), then the exposed ones not published."""
    out: list[dict[str, Any]] = []
    for p in spec.ports:
        port: dict[str, Any] = {"containerPort": p.container_port, "protocol": p.protocol.upper()}
        if p.host_port is not None:
            port["hostPort"] = p.host_port
            if p.host_ip:
                port["hostIP"] = p.host_ip
        out.append(port)
    published = {(p.container_port, p.protocol) for p in spec.ports}
    for number, protocol in exposed_ports(spec):
        if (number, protocol) not in published:
            out.append({"containerPort": number, "protocol": protocol.upper()})
    return out


def _probes(spec: ServiceSpec, kv: KubernetesVars) -> dict[str, Any]:
    """A run-once container's health restarts nothing (Docker acts on exits only), so it
    gets readiness alone, which still says when its Service sends it traffic."""
    p = probe(spec.healthcheck, kv)
    if p is None:
        return {}
    if run_once(spec):
        return {"readinessProbe": p}
    return {"livenessProbe": p, "readinessProbe": copy.deepcopy(p)}  # no YAML anchors


def _container(spec: ServiceSpec, losses: list[Loss], kv: KubernetesVars) -> dict[str, Any]:
    c: dict[str, Any] = {"name": k8s_name(spec.name), "image": spec.image}
    c["imagePullPolicy"] = PULL[spec.pull_policy]
    if spec.entrypoint is not None:
        c["command"] = kv.argv(spec.entrypoint, "entrypoint")
    if spec.command is not None:
        c["args"] = kv.argv(spec.command, "command")
    if spec.working_dir is not None:
        c["workingDir"] = spec.working_dir
    c["env"] = kv.env  # the probe below may add the variables it reads
    if spec.env_files:
        # `env` wins over `envFrom`, as `environment` wins over env_file in healerd.
        c["envFrom"] = [{"secretRef": {"name": f"{k8s_name(spec.name)}-env"}}]
    ports = _ports(spec)
    if ports:
        c["ports"] = ports
    limits: dict[str, str] = {}
    if spec.mem_limit is not None:
        limits["memory"] = str(spec.mem_limit)
    if spec.cpus is not None:
        limits["cpu"] = f"{round(spec.cpus * 1000)}m"
    if limits:
        c["resources"] = {"limits": limits}
    c |= _probes(spec, kv)
    if not kv.env:
        del c["env"]
    extra, security = kubernetes_fields(spec, losses)
    c |= extra
    sc = {**(_security(spec, losses) or {}), **security}
    if sc:
        c["securityContext"] = sc
    return c


def run_once(spec: ServiceSpec) -> bool:
    """Its containers may finish (healerd.core.jobs): a Job, not a Deployment."""
    return spec.restart is not None and spec.restart.run_once


def _template(spec: ServiceSpec, losses: list[Loss], kv: KubernetesVars | None) -> dict[str, Any]:
    volumes, mounts = _volumes(spec, losses)
    container = _container(spec, losses, kv or KubernetesVars(spec, secret_name(spec)))
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": whole_seconds(spec.stop_grace_period),
    }
    if volumes:
        pod["volumes"] = volumes
    template_meta: dict[str, Any] = {"labels": labels(spec)}
    if spec.labels:
        # Label values are restricted in Kubernetes; annotations take any text.
        template_meta["annotations"] = dict(spec.labels)
    return {"metadata": template_meta, "spec": pod}


def deployment(
    spec: ServiceSpec, losses: list[Loss], kv: KubernetesVars | None = None
) -> dict[str, Any]:
    name = k8s_name(spec.name)
    u = spec.update_config
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(spec, name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "strategy": strategy(spec),
            "minReadySeconds": whole_seconds(u.min_ready_seconds),
            "progressDeadlineSeconds": max(
                whole_seconds(u.progress_deadline), whole_seconds(u.min_ready_seconds) + 1
            ),
            "template": _template(spec, losses, kv),
        },
    }


# on-failure without N retries without end in healerd: the most a backoffLimit holds.
NO_LIMIT = 2**31 - 1


def job(spec: ServiceSpec, losses: list[Loss], kv: KubernetesVars | None = None) -> dict[str, Any]:
    """A run-once service: each replica a completion, run at once as healerd runs them.
    `no` fails at the first non-zero exit (Never, backoffLimit 0); `on-failure:N`
    restarts the container in its pod, N times per replica (OnFailure, a backoffLimit of
    N x replicas, the Job's budget for all its pods together)."""
    assert spec.restart is not None
    template = _template(spec, losses, kv)
    if spec.restart.mode == RestartMode.NO:
        template["spec"]["restartPolicy"], limit = "Never", 0
    else:
        template["spec"]["restartPolicy"] = "OnFailure"
        n = spec.restart.max_retries
        limit = NO_LIMIT if n is None else min(n * max(spec.replicas, 1), NO_LIMIT)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(spec, k8s_name(spec.name)),
        "spec": {
            "completions": spec.replicas,
            "parallelism": spec.replicas,
            "backoffLimit": limit,
            "template": template,
        },
    }


def secret_name(spec: ServiceSpec) -> str:
    return f"{k8s_name(spec.name)}-env"


def secret(spec: ServiceSpec, values: dict[str, str]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(spec, secret_name(spec)),
        "type": "Opaque",
        "data": data,
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": k8s_name(name), "labels": {"healerd.io/volume": name}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _service_docs(spec: ServiceSpec, opts: Options, out: Rendered) -> list[str]:
    if k8s_name(spec.name) != spec.name:
        out.notes.append(f"{spec.name}: named {k8s_name(spec.name)} (a DNS label) in Kubernetes")
    if user_networks(spec):
        out.losses.append(Loss(spec.name, "networks", "Kubernetes has one flat pod network; "
                               "isolate with NetworkPolicy"))  # fmt: skip
    for field, value in changed(spec, tuple(LOST)):
        out.losses.append(Loss(spec.name, field, f"{value}: {LOST[field]}"))
    order_lost(spec, out.losses, "Kubernetes")
    kubernetes_losses(spec, out.losses)  # secrets, configs, links, addresses, GPUs
    if run_once(spec):
        _job_notes(spec, out)
    for net, names in spec.network_aliases:
        reason = f"{', '.join(names)} on {net}: a Service gives only its own name"
        out.losses.append(Loss(spec.name, "networks.aliases", reason))
    kv = KubernetesVars(spec, secret_name(spec))
    workload = job if run_once(spec) else deployment
    docs = [dump(workload(spec, out.losses, kv))]
    if wants_service(spec, opts.depended_on):
        docs.append(dump(service(spec)))
    out.warnings += argv_warnings(spec, "read from the Secret " + secret_name(spec))
    if (spec.env_files or kv.secret) and spec.name in opts.secrets:
        # The environment wins over env files in healerd: its values win here too.
        docs.append(dump(secret(spec, {**opts.secrets[spec.name], **kv.secret})))
    elif spec.env_files or kv.secret:
        out.notes.append(_secret_note(spec, kv))
    return docs


def _job_notes(spec: ServiceSpec, out: Rendered) -> None:
    """What a Job cannot carry: it is not rolled, and its retries are counted together."""
    for field, value in changed(spec, _ROLLOUT):
        out.losses.append(Loss(spec.name, field, f"{value}: a Job is not rolled out"))
    n = spec.restart.max_retries if spec.restart is not None else None
    if n is not None and spec.replicas > 1:
        out.notes.append(
            f"{spec.name}: restart {spec.restart}: a Job counts the retries of all its pods "
            f"together: backoffLimit {n * spec.replicas} (N x replicas); backoffLimitPerIndex "
            "with completionMode: Indexed counts them per replica (Kubernetes 1.29 or newer)"
        )


def _secret_note(spec: ServiceSpec, kv: KubernetesVars) -> str:
    """How to make the Secret that was not written (values are never printed)."""
    name = secret_name(spec)
    what = "env_file values are" if spec.env_files else "values from variables are"
    args = [f"--from-env-file={f}" for f in spec.env_files]
    args += [f"--from-literal={k}=..." for k in kv.secret]
    keys = f" (keys {', '.join(kv.secret)} hold values from variables)" if kv.secret else ""
    return (
        f"{spec.name}: {what} not exported; create the Secret {name}{keys}: "
        f"kubectl create secret generic {name} " + " ".join(args)
    )


def render(specs: list[ServiceSpec], opts: Options) -> Rendered:
    out = Rendered("")
    docs: list[str] = []
    opts = replace(opts, depended_on=opts.depended_on | depended_on(specs))
    for spec in specs:
        docs += _service_docs(spec, opts, out)
    named = sorted({v.source for s in specs for v in s.volumes if v.source[:1] not in ("", "/")})
    docs += [PVC_COMMENT + dump(claim(v)) for v in named]
    out.text = header("kubernetes", opts.sources) + "---\n".join(docs)
    return out
