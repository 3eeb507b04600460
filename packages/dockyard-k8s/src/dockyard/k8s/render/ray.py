"""The trainer and inference fleets on KubeRay: ConfigMap, checkpoint PVC, RayJob (or RayCluster).

One Ray cluster per recipe: a CPU head (runs the driver, which orchestrates and never holds
weights) and one worker group per fleet role. Every Ray worker pod carries its role four ways:
the Ray custom resource ``fleet:<role>`` (what dockyard's runtime pins placement groups to), the
``DOCKYARD_FLEET_ROLE`` environment variable, the pod label ``dockyard.io/fleet-role`` and the
Ray node label of the same name (KubeRay's group ``labels``). The head has no role: it runs the
driver and advertises no fleet resource.

Each pod mounts the resolved dockyard config (one self-contained YAML in a ConfigMap, at
``/etc/dockyard/config.yaml``), the checkpoint volume, and a memory-backed ``/dev/shm``.
Ray containers get requests = limits (KubeRay's advice: Ray sizes itself from the limits).
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from dockyard.k8s.quantity import parse_quantity
from dockyard.k8s.recipe import RayGroup
from dockyard.k8s.render.common import (
    CONFIG_FILE,
    CONFIG_MOUNT,
    FLEET_ROLE_ENV,
    FLEET_ROLE_LABEL,
    RAY_POD_LABEL,
    SANDBOX_TOKEN_FILE_ENV,
    SANDBOX_URL_ENV,
    TOKEN_MOUNT,
    Context,
    env_list,
    scheduling,
)

COMPONENT = "ray"
HEAD_PORTS = [
    {"name": "gcs", "containerPort": 6379, "protocol": "TCP"},
    {"name": "dashboard", "containerPort": 8265, "protocol": "TCP"},
    {"name": "client", "containerPort": 10001, "protocol": "TCP"},
]


def config_text(ctx: Context) -> str:
    return yaml.safe_dump(ctx.config, sort_keys=False, default_flow_style=False)


def config_map(ctx: Context) -> dict[str, Any]:
    text = config_text(ctx)
    meta = ctx.metadata("config", COMPONENT)
    meta["annotations"] = {"dockyard.io/config-sha256": hashlib.sha256(text.encode()).hexdigest()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {CONFIG_FILE: text}}


def checkpoint_claim_name(ctx: Context) -> str:
    return ctx.infra.storage.checkpoint.existing_claim or ctx.object_name("checkpoints")


def checkpoint_pvc(ctx: Context) -> dict[str, Any] | None:
    ck, vol = ctx.recipe.checkpoint, ctx.infra.storage.checkpoint
    if not ck.enabled or vol.existing_claim:
        return None
    spec: dict[str, Any] = {
        "accessModes": [vol.access_mode],
        "resources": {"requests": {"storage": ck.size}},
    }
    if vol.storage_class:
        spec["storageClassName"] = vol.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": ctx.metadata("checkpoints", COMPONENT),
        "spec": spec,
    }


def _env(ctx: Context, role: str | None) -> list[dict[str, str]]:
    env: dict[str, str] = {}
    if role is not None:
        env[FLEET_ROLE_ENV] = role
    env["DOCKYARD_CONFIG"] = f"{CONFIG_MOUNT}/{CONFIG_FILE}"
    if ctx.recipe.sandbox.enabled:
        env[SANDBOX_URL_ENV] = ctx.sandbox_url
        if ctx.recipe.sandbox.token_secret:
            env[SANDBOX_TOKEN_FILE_ENV] = f"{TOKEN_MOUNT}/token"
    env |= ctx.recipe.ray.env
    return env_list(env)


def _volumes(ctx: Context, shm: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": ctx.object_name("config")}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if ctx.recipe.checkpoint.enabled:
        volumes.append(
            {
                "name": "checkpoints",
                "persistentVolumeClaim": {"claimName": checkpoint_claim_name(ctx)},
            }
        )
        mounts.append({"name": "checkpoints", "mountPath": ctx.recipe.checkpoint.mount_path})
    secret = ctx.recipe.sandbox.token_secret if ctx.recipe.sandbox.enabled else None
    if secret:
        volumes.append(
            {
                "name": "sandbox-token",
                "secret": {
                    "secretName": secret,
                    "defaultMode": 0o440,
                    "items": [{"key": "token", "path": "token"}],
                },
            }
        )
        mounts.append({"name": "sandbox-token", "mountPath": TOKEN_MOUNT, "readOnly": True})
    return volumes, mounts


def _pod_template(
    ctx: Context,
    *,
    role: str | None,
    fleet: str,
    cpu: str,
    memory: str,
    gpus: int,
    shm: str,
    head: bool,
) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        resources[ctx.infra.gpu_resource] = str(gpus)
    volumes, mounts = _volumes(ctx, shm)
    container: dict[str, Any] = {
        "name": "ray-head" if head else "ray-worker",
        "image": ctx.infra.images.runtime,
        "imagePullPolicy": ctx.infra.images.pull_policy,
        "env": _env(ctx, role),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": mounts,
    }
    if head:
        container["ports"] = [dict(p) for p in HEAD_PORTS]
    else:
        container["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}
    labels = ctx.labels(COMPONENT, role) | {RAY_POD_LABEL: "true"}
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [container], "volumes": volumes, **scheduling(ctx, fleet)},
    }


def fleet_resources_param(role: str) -> str:
    """``rayStartParams.resources`` for a role: the custom resource ``fleet:<role>`` (1000) that
    dockyard's runtime pins each fleet's placement groups to (``dockyard.train.runtime.cluster``).
    KubeRay pastes the value into the ``ray start`` shell command, hence the quoting (KubeRay's
    documented form)."""
    return '"{\\"fleet:' + role + '\\": 1000}"'


def _worker_group(
    ctx: Context, role: str, group: RayGroup, nodes: int, gpus: int
) -> dict[str, Any]:
    return {
        "groupName": role,
        "replicas": nodes,
        "minReplicas": nodes,
        "maxReplicas": nodes,
        "rayStartParams": {"resources": fleet_resources_param(role), **group.ray_start_params},
        "labels": {FLEET_ROLE_LABEL: role},
        "template": _pod_template(
            ctx,
            role=role,
            fleet=role,
            cpu=group.cpu,
            memory=group.memory,
            gpus=gpus,
            shm=group.shm,
            head=False,
        ),
    }


def ray_cluster_spec(ctx: Context) -> dict[str, Any]:
    ray, shape = ctx.recipe.ray, ctx.shape
    head_mem = parse_quantity(ray.head.memory)
    # the head's /dev/shm: a third of its memory (Ray's object store default is 30%)
    head_shm = f"{int(head_mem / 3 / 2**20)}Mi"
    head = {
        "rayStartParams": {"dashboard-host": "0.0.0.0", **ray.head.ray_start_params},
        "template": _pod_template(
            ctx,
            role=None,
            fleet="head",
            cpu=ray.head.cpu,
            memory=ray.head.memory,
            gpus=0,
            shm=head_shm,
            head=True,
        ),
    }
    head["template"]["metadata"]["labels"][FLEET_ROLE_LABEL] = "head"
    return {
        "rayVersion": ray.ray_version,
        "authOptions": {"mode": ray.auth},
        "enableInTreeAutoscaling": False,
        "headGroupSpec": head,
        "workerGroupSpecs": [
            _worker_group(ctx, "trainer", ray.trainer, shape.trainer_nodes, shape.trainer_gpus),
            _worker_group(
                ctx, "inference", ray.inference, shape.inference_nodes, shape.inference_gpus
            ),
        ],
    }


def entrypoint(ctx: Context) -> str:
    return ctx.recipe.ray.entrypoint or f"dockyard train --config {CONFIG_MOUNT}/{CONFIG_FILE}"


def ray_object(ctx: Context) -> dict[str, Any]:
    ray = ctx.recipe.ray
    meta = ctx.metadata(None, COMPONENT)
    if ray.mode == "raycluster":
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": meta,
            "spec": ray_cluster_spec(ctx),
        }
    spec: dict[str, Any] = {
        "entrypoint": entrypoint(ctx),
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": ray.shutdown_after_job_finishes,
        "ttlSecondsAfterFinished": ray.ttl_seconds_after_finished,
        "backoffLimit": ray.backoff_limit,
        "rayClusterSpec": ray_cluster_spec(ctx),
    }
    if ray.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = ray.active_deadline_seconds
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": spec}


def render_ray(ctx: Context) -> list[dict[str, Any]]:
    out = [config_map(ctx)]
    pvc = checkpoint_pvc(ctx)
    if pvc is not None:
        out.append(pvc)
    out.append(ray_object(ctx))
    return out
