"""Starting or joining the Ray cluster.

* ``cluster.address`` null: a local Ray instance sized to this machine (all CPUs unless
  ``cluster.cpus_per_node``; GPUs from ``cluster.gpus_per_node``), dashboard and usage stats off.
* ``cluster.address`` set (``auto``, ``ray://head:10001``): join that cluster, which must have
  ``cluster.num_nodes`` alive nodes with ``cluster.gpus_per_node`` GPUs each
  (:func:`shape_problems`; a local instance is one node). The fleets' CPU shares are planned on
  the smallest node (:func:`node_cpus`): an actor never asks for more than one node has.

Node roles for multi-node runs: start each node's raylet with ``DOCKYARD_FLEET_ROLE`` set to
``trainer``, ``inference`` or ``sandbox`` (comma-separate several) and the node advertises the
custom resource ``fleet:<role>``; placement groups then pin each fleet to its nodes. A node
without the variable serves every fleet. :func:`node_resources` computes what a node offers.

Workers run this process's interpreter. Ray (>= 2.45) has a hook for drivers started by
``uv run``: it re-launches every worker as ``uv run --python X python`` inside a zipped copy of
the current directory. Without the lock file and ``.venv`` there (both git-ignored), that ``uv
run`` builds an empty virtualenv and every worker dies with ``ModuleNotFoundError: No module named
'ray'`` ("worker startup repeatedly failed"): this is how ``./dev test`` (``uv run pytest``)
failed every Ray actor. :func:`init_ray` turns the hook off unless the user set
``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

import psutil

ROLE_ENV = "DOCKYARD_FLEET_ROLE"
ROLES = ("trainer", "inference", "sandbox")
INSTALL_HINT = "the Ray runtime needs Ray: pip install dockyard-train"
UV_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
LOCAL_IS_ONE_NODE = (
    "cluster.num_nodes: {n} machines planned, but cluster.address is null, which starts a "
    "one-machine Ray instance here: start Ray on each machine (`ray start --head` on one, "
    "`ray start --address=<head>:6379` on the others) and set cluster.address=auto, or set "
    "cluster.num_nodes=1"
)


def require_ray() -> Any:
    """Import Ray or fail with the install command; Ray's ``uv run`` hook is off (see above)."""
    os.environ.setdefault(UV_HOOK_ENV, "0")  # read once, when Ray is first imported
    try:  # lazy: Ray reads the variable above at import; the pre-flight imports this module
        import ray
    except ImportError as e:  # pragma: no cover - exercised in the slim-install job
        raise ImportError(INSTALL_HINT) from e
    disable_uv_run_hook()
    return ray


def disable_uv_run_hook() -> bool:
    """Keep Ray workers on this interpreter under ``uv run`` (see the module docstring).

    Sets ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0`` unless already set, and also updates Ray's constant
    when Ray was imported before (Ray reads the variable once, at import; ``ray.init`` reads the
    constant). Returns whether the hook is off. Call before ``ray.init``.
    """
    os.environ.setdefault(UV_HOOK_ENV, "0")
    enabled = _uv_hook_enabled()
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, UV_HOOK_ENV):
        setattr(constants, UV_HOOK_ENV, enabled)
    return not enabled


def _uv_hook_enabled() -> bool:
    return os.environ.get(UV_HOOK_ENV, "1").lower() in ("1", "true")  # Ray's env_bool


def check_worker_interpreter(ray: Any) -> None:
    """Fail clearly when Ray's job would start workers through ``uv run`` that nobody asked for."""
    if _uv_hook_enabled():
        return
    py_exe = dict(ray.get_runtime_context().runtime_env or {}).get("py_executable") or ""
    if "uv run" in py_exe:
        ray.shutdown()
        raise RuntimeError(
            f"Ray would start its workers with {py_exe!r} despite {UV_HOOK_ENV}=0 (a Ray change?);"
            f" run the driver without `uv run` (e.g. {sys.executable} -m ...) or set "
            f"{UV_HOOK_ENV}=0 before Ray is imported"
        )


def fleet_roles(value: str | None = None) -> tuple[str, ...]:
    """The roles named by ``DOCKYARD_FLEET_ROLE`` (all roles when unset or empty)."""
    raw = os.environ.get(ROLE_ENV, "") if value is None else value
    roles = tuple(r.strip() for r in raw.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise ValueError(
            f"{ROLE_ENV}={raw!r}: unknown role {bad[0]!r}; use a comma-separated subset of "
            f"{', '.join(ROLES)}"
        )
    return roles or ROLES


def node_resources(roles: tuple[str, ...] | None = None) -> dict[str, float]:
    """Custom Ray resources a node advertises for its fleet roles (``fleet:<role>`` = 1000)."""
    return {f"fleet:{r}": 1000.0 for r in (roles or fleet_roles())}


def shape_problems(nodes: list[dict[str, Any]], cluster: Any) -> list[str]:
    """What keeps the Ray cluster described by ``nodes`` (``ray.nodes()``) from being the one
    ``cluster`` (a ``ClusterConfig``) plans for: fewer alive nodes than ``num_nodes``, or fewer
    nodes with ``gpus_per_node`` GPUs. Each problem names the key and the next step."""
    want_nodes = int(getattr(cluster, "num_nodes", 1) or 1)
    want_gpus = int(getattr(cluster, "gpus_per_node", 0) or 0)
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    fit = [n for n in alive if float(n.get("Resources", {}).get("GPU", 0)) >= want_gpus]
    gpus = sorted(float(n.get("Resources", {}).get("GPU", 0)) for n in alive)
    if len(fit) >= want_nodes:
        return []
    if want_gpus and len(alive) >= want_nodes:
        return [
            f"cluster.gpus_per_node: {want_nodes} node(s) with {want_gpus} GPU(s) each planned, "
            f"but the Ray cluster's {len(alive)} alive node(s) have {gpus} GPUs: start Ray "
            "with `--num-gpus` on the GPU nodes, or set cluster.gpus_per_node / num_nodes to "
            "what the cluster has"
        ]
    return [
        f"cluster.num_nodes: {want_nodes} node(s) planned, but the Ray cluster has "
        f"{len(alive)} alive node(s): run `ray start --address=<head>:6379` on the others "
        f"(`ray status` lists them), or set cluster.num_nodes={len(alive)}"
    ]


def node_cpus() -> float:
    """CPUs of the smallest alive node that has any (a KubeRay head often has none): the most
    one actor can be given wherever it lands."""
    ray = require_ray()
    cpus = [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive", False)]
    cpus = [c for c in cpus if c > 0]
    return min(cpus) if cpus else float(ray.cluster_resources().get("CPU", 1))


TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def quiet_token_auth_notice() -> None:
    """Ray 2.60 turns token authentication on for every new local cluster and says so at each
    start ("... Set RAY_AUTH_MODE=disabled to opt out"): the line is dropped, the behaviour
    (a token written to ~/.ray/auth_token, checked on every connection) is Ray's own, unchanged.
    Its other warnings (auth disabled, a token missing) still print."""
    log = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(getattr(f, "dockyard", False) for f in log.filters):
        notice = logging.Filter()
        notice.filter = lambda record: TOKEN_AUTH_NOTICE not in record.getMessage()  # type: ignore[method-assign]
        notice.dockyard = True  # type: ignore[attr-defined]
        log.addFilter(notice)


def init_ray(cluster: Any = None, *, log_to_driver: bool = False) -> dict[str, Any]:
    """Start (or join) Ray per a ``ClusterConfig``; returns ``ray.cluster_resources()``.

    Re-entrant: an already initialised Ray is kept as is. Workers use this interpreter, also
    under ``uv run`` (:func:`disable_uv_run_hook`; checked after start).
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray.cluster_resources()
    address = getattr(cluster, "address", None)
    namespace = getattr(cluster, "namespace", "dockyard")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts worker processes at niceness 15; here the workers *are* the workload (trainer,
    # engines), and on a shared machine a niced engine starves.
    os.environ.setdefault("RAY_worker_niceness", "0")
    if address:
        ray.init(address=address, namespace=namespace, log_to_driver=log_to_driver)
        check_worker_interpreter(ray)
        if problems := shape_problems(ray.nodes(), cluster):  # what the fleets are planned on
            ray.shutdown()
            raise RuntimeError(f"the Ray cluster at {address!r}: " + "; ".join(problems))
        return ray.cluster_resources()
    if int(getattr(cluster, "num_nodes", 1) or 1) > 1:  # the pre-flight says so first
        raise RuntimeError(LOCAL_IS_ONE_NODE.format(n=cluster.num_nodes))
    quiet_token_auth_notice()
    cpus = getattr(cluster, "cpus_per_node", None) or os.cpu_count() or 1
    gpus = getattr(cluster, "gpus_per_node", 0) or 0
    store_gb = getattr(cluster, "object_store_memory_gb", None)
    kwargs: dict[str, Any] = {
        "num_cpus": cpus,
        "num_gpus": gpus,
        "include_dashboard": False,
        "namespace": namespace,
        "log_to_driver": log_to_driver,
        "resources": node_resources(),
        "configure_logging": True,
        "logging_level": "warning",
    }
    if store_gb:
        kwargs["object_store_memory"] = int(store_gb * (1 << 30))
    # On an overloaded machine Ray's raylet can give up waiting (15 s, hard-coded) for its
    # metrics agent (ray-project/ray#65983): retry a few times before failing. A failed start
    # leaves its GCS, dashboard and monitors running (ray.shutdown() does not know them): stop
    # them, or every retry adds load and a long-lived process (a test session) accumulates them.
    for attempt in range(5):
        started = _ray_children()
        try:
            ray.init(**kwargs)
            break
        except Exception as e:
            ray.shutdown()
            _stop(_ray_children() - started)
            if "timed out during startup" not in str(e) or attempt == 4:
                raise
    check_worker_interpreter(ray)
    return ray.cluster_resources()


def _ray_children() -> set[Any]:
    """Ray's programs (``.../ray/...``) started by this process: its descendants, and those
    of a session named after this process (``session_..._<pid>``) that a crashed raylet
    orphaned (its agents are re-parented to init)."""
    mine = f"_{os.getpid()}"
    out = set()
    for p in psutil.process_iter():
        try:
            args = p.cmdline()
            if not any("/ray/" in a for a in args):
                continue
            own_session = any("session_" in a and a.rstrip("/").endswith(mine) for a in args)
            if own_session or os.getpid() in {q.pid for q in p.parents()}:
                out.add(p)
        except psutil.Error:
            continue
    return out


def _stop(procs: set[Any], grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, the given processes (our own children only)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(procs), timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def shutdown_ray() -> None:
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()
