"""Multi-node Ray on one machine: a head and two worker nodes, each a separate ``ray start``
process with its own ports and its fleet roles as the custom resources ``fleet:<role>`` (what
``DOCKYARD_FLEET_ROLE`` gives a node, see ``dockyard.train.runtime.cluster``); the driver joins
through ``cluster.address``.

========  ======================  ==========================================================
node      roles                   hosts
========  ======================  ==========================================================
head      ``trainer,sandbox``     the driver's side (replay buffer, collector), the trainer
                                  rank, the sandbox service
w1, w2    ``inference``           one vLLM engine on one of them; the other is the spare
========  ======================  ==========================================================

1. The configured strategies are what Ray places with, across real nodes: with
   ``STRICT_SPREAD`` two inference actors land on two nodes, with ``STRICT_PACK`` on one.
2. A GRPO run (quickstart model, 1 trainer rank, 1 engine) places every fleet on its role's
   nodes with its configured strategy; then the engine's node is killed after step 1 (its
   raylet and every process of that node, SIGKILL: a machine lost); Ray re-places the engine's
   bundle on the spare node, the run restarts the engine there, re-sends the weights, and
   finishes: every step once in metrics.jsonl, each on whole groups.

Never ``ray stop`` here: it stops every Ray on the machine (a CI job's own). Each node is a
``ray start --block`` in its own process group with its own ``--temp-dir``; the fixture kills
exactly those processes (and any that name that temp dir) when the module ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

# The driver of a multi-node cluster is a fresh process, as a user's is: Ray keeps its
# authentication mode and connection state per process, and a test session that already ran
# a local Ray (every other integration module) cannot also be a clean driver of this cluster
# (ActorDiedError / InvalidAuthToken in CI). test_in_a_fresh_driver_process runs this module's
# tests in their own pytest process; there they run, here they are skipped.
INNER_ENV = "DOCKYARD_MULTINODE_INNER"
INNER = os.environ.get(INNER_ENV) == "1"
inner = pytest.mark.skipif(not INNER, reason="run by test_in_a_fresh_driver_process")

ROLES = {"head": "trainer,sandbox", "w1": "inference", "w2": "inference"}
CPUS = {"head": 2, "w1": 2, "w2": 2}
AUTH_MODE = "disabled"  # Ray 2.60 turns on token auth when ~/.ray/auth_token exists: the
# nodes and this driver agree on no token (a one-machine cluster on loopback)
NODE_TAG = "dockyard-test-node:"  # a custom resource naming each node (all share one IP)
# the GCS declares a silent node dead after ~1.5 s instead of Ray's default ~15-30 s
FAST_HEALTH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    log: Path
    address: str = ""
    node_id: str = ""


START_TRIES = 3  # starts of a worker node (see _wait_nodes)
PORTS_PER_NODE = 130  # 8 fixed ports, then 120 worker ports


def _port_base(nodes: int) -> int:
    """The first of ``nodes`` × PORTS_PER_NODE free ports below Linux's ephemeral range
    (32768-): Ray's processes bind ephemeral ports as they start, so ports picked there (or
    by binding port 0) can be taken by the time a later node starts."""
    span = nodes * PORTS_PER_NODE
    for base in range(20000 + (os.getpid() % 20) * span, 32768 - span, span):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + span):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError("no free port range for the test cluster")


def _start_node(name: str, head: str | None, tmp: Path, base: int, attempt: int = 1) -> Node:
    """``ray start --block`` for node ``name`` (the head when ``head`` is None) on the ports
    from ``base`` on; its temp dir and log are ``tmp/<name>-<attempt>``."""
    (p_nm, p_om, p_agent, p_grpc, p_metrics, p_renv, p_client, p_gcs) = range(base, base + 8)
    worker_ports = base + 10
    resources = {f"fleet:{r}": 1000.0 for r in ROLES[name].split(",")}
    resources[NODE_TAG + name] = 1.0
    args = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
        "--node-ip-address=127.0.0.1", f"--num-cpus={CPUS[name]}", "--num-gpus=0",
        f"--resources={json.dumps(resources)}", "--object-store-memory=200000000",
        f"--node-manager-port={p_nm}", f"--object-manager-port={p_om}",
        f"--dashboard-agent-listen-port={p_agent}", f"--dashboard-agent-grpc-port={p_grpc}",
        f"--metrics-export-port={p_metrics}", f"--runtime-env-agent-port={p_renv}",
        f"--min-worker-port={worker_ports}", f"--max-worker-port={base + PORTS_PER_NODE - 1}",
        "--disable-usage-stats",
        f"--temp-dir={tmp / f'{name}-{attempt}'}",  # each node its own sockets and logs
    ]  # fmt: skip
    if head is None:
        args += [
            "--head", f"--port={p_gcs}", f"--ray-client-server-port={p_client}",
            "--include-dashboard=false",
        ]  # fmt: skip
    else:
        args += [f"--address={head}"]
    env = {**os.environ, **FAST_HEALTH, "DOCKYARD_FLEET_ROLE": ROLES[name]}
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"  # workers on this interpreter (cluster.py)
    env["RAY_AUTH_MODE"] = AUTH_MODE  # as the driver's (the fixture sets it)
    log = tmp / f"{name}-{attempt}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Node(name, proc, log, address=f"127.0.0.1:{p_gcs}" if head is None else head)


def _wait_nodes(nodes: dict[str, Node], restart, timeout_s: float = 180.0) -> None:
    """Join the cluster (this process becomes its driver) and wait until every node is alive;
    fills in each node's id. A worker whose ``ray start`` exits is started again
    (``restart(name, attempt)``, at most START_TRIES in all): on a loaded machine Ray 2.6x's
    raylet can abort on a hard-coded 15 s wait for its agent (docs/deployment.md, Slurm)."""
    import ray

    from dockyard.train.runtime.cluster import require_ray

    require_ray()  # Ray's `uv run` hook off before the driver starts
    tries = dict.fromkeys(nodes, 1)
    deadline = time.monotonic() + timeout_s
    while True:
        for name, n in list(nodes.items()):
            if n.proc.poll() is None:
                continue
            if name == "head" or tries[name] >= START_TRIES:
                raise RuntimeError(f"ray start for {name} exited: {n.log.read_text()[-3000:]}")
            tries[name] += 1
            nodes[name] = restart(name, tries[name])
        if not ray.is_initialized() and _listening(nodes["head"].address):
            ray.init(address=nodes["head"].address, namespace="dockyard")
        if ray.is_initialized():
            for info in ray.nodes():
                for name, n in nodes.items():
                    if info["Alive"] and info["Resources"].get(NODE_TAG + name):
                        n.node_id = info["NodeID"]
            if all(n.node_id for n in nodes.values()):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not up after {timeout_s} s: " + ", ".join(nodes))
        time.sleep(0.5)


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) == 0


def _ours(tmp: Path, nodes: dict[str, Node]) -> set:
    """Every process of this cluster: the nodes' ``ray start`` and their descendants, and
    whatever names this cluster's temp dir (orphans of a killed raylet)."""
    import psutil

    out = set()
    for n in nodes.values():
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(n.proc.pid)
            out |= {top, *top.children(recursive=True)}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(str(tmp) in a for a in p.cmdline()):
                out.add(p)
    return out


def _ours_node(node: Node) -> set:
    import psutil

    top = psutil.Process(node.proc.pid)
    return {top, *top.children(recursive=True)}


def _kill(procs: set) -> None:
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(list(procs), timeout=10)


def _set_auth_mode(mode: str | None) -> None:
    """``RAY_AUTH_MODE`` for this process and its children (None: unset), and Ray's cached
    config refreshed: Ray reads the variable into its C++ config once per process (a local
    ``ray.init`` earlier in the session turned token mode on there), so setting the variable
    alone left the driver and the nodes disagreeing (InvalidAuthToken) and, restored, broke
    every later module's local Ray."""
    from ray._raylet import Config

    if mode is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = mode
    Config.initialize("")


@pytest.fixture(scope="module")
def cluster():
    """The three nodes (module scope); every process they started is killed at the end."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    auth = os.environ.get("RAY_AUTH_MODE")
    _set_auth_mode(AUTH_MODE)
    tmp = Path(tempfile.mkdtemp(prefix="dy-mn-", dir="/tmp"))  # short: Ray's socket paths
    nodes: dict[str, Node] = {}
    base = _port_base(len(ROLES))
    try:
        nodes["head"] = _start_node("head", None, tmp, base)
        address = nodes["head"].address
        nodes["w1"] = _start_node("w1", address, tmp, base + PORTS_PER_NODE)
        nodes["w2"] = _start_node("w2", address, tmp, base + 2 * PORTS_PER_NODE)

        def restart(name: str, attempt: int) -> Node:
            _kill(_ours(tmp / f"{name}-{attempt - 1}", {}))  # the failed start's leftovers
            return _start_node(name, address, tmp, base + offset[name], attempt)

        offset = {"w1": PORTS_PER_NODE, "w2": 2 * PORTS_PER_NODE}
        _wait_nodes(nodes, restart)
        yield address, nodes
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for n in nodes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(n.proc.pid, signal.SIGTERM)
        time.sleep(2)
        _kill(_ours(tmp, nodes))
        for n in nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                n.proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
        _set_auth_mode(auth)


def _node_of(actor) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def _roles_of(node_id: str) -> set[str]:
    import ray

    (info,) = [n for n in ray.nodes() if n["NodeID"] == node_id]
    return {k.split(":", 1)[1] for k in info["Resources"] if k.startswith("fleet:")}


class Echo:
    def ping(self) -> int:
        return os.getpid()


@inner
def test_each_fleet_strategy_places_across_the_nodes(cluster) -> None:
    """STRICT_SPREAD puts two inference actors on the two inference nodes, STRICT_PACK on
    one; neither lands on the head (no ``fleet:inference`` there)."""
    _, nodes = cluster
    from dockyard.train.runtime.placement import Fleet, FleetSpec

    workers = {nodes["w1"].node_id, nodes["w2"].node_id}
    for strategy, distinct in (("STRICT_SPREAD", 2), ("STRICT_PACK", 1)):
        spec = FleetSpec("inference", size=2, cpus=0.25, strategy=strategy, name=strategy)
        fleet = Fleet(spec, Echo, lambda i: ((), {}))
        try:
            import ray

            assert ray.util.placement_group_table(fleet.pg)["strategy"] == strategy
            landed = {_node_of(a) for a in fleet.actors}
            assert len(landed) == distinct, (strategy, landed)
            assert landed <= workers
        finally:
            fleet.shutdown()
    # a strategy that cannot be met fails with the key to change
    spec = FleetSpec("trainer", size=2, cpus=0.25, strategy="STRICT_SPREAD", name="strict")
    from dockyard.train.runtime.placement import placement_group

    with pytest.raises(RuntimeError, match=r"cluster\.placement\.trainer"):
        placement_group(spec, timeout_s=5)


def _rows(cfg) -> list[dict]:
    path = Path(cfg.logger.log_dir) / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


@inner
def test_grpo_places_its_fleets_and_survives_a_lost_node(cluster, module_quickstart_cfg) -> None:
    import ray

    from dockyard.train.algorithms.grpo import train

    address, nodes = cluster
    ray.shutdown()  # the run joins through cluster.address (and checks num_nodes) itself
    by_id = {n.node_id: n for n in nodes.values()}
    cfg = module_quickstart_cfg(
        f"cluster.address={address}",
        "cluster.num_nodes=3",
        "cluster.placement.trainer=STRICT_PACK",
        "cluster.placement.inference=PACK",
        "cluster.placement.sandbox=STRICT_SPREAD",
        "grpo.max_num_steps=4",
        "grpo.val_at_end=false",
    )
    seen: dict[str, object] = {}

    def on_step(step: int, stack) -> None:
        if step != 1:
            seen.setdefault("engine_after", {})[step] = _node_of(stack.engines.actors[0])  # type: ignore[index]
            return
        fleets = {"trainer": stack.trainer.fleet, "inference": stack.engines}
        if stack.sandbox is not None:
            fleets["sandbox"] = stack.sandbox.fleet
        for role, fleet in fleets.items():
            table = ray.util.placement_group_table(fleet.pg)
            assert table["strategy"] == getattr(cfg.cluster.placement, role), role
            for actor in fleet.actors:
                node = _node_of(actor)
                assert role in _roles_of(node), (role, by_id[node].name)
        seen["fleets"] = sorted(fleets)
        engine_node = by_id[_node_of(stack.engines.actors[0])]
        assert engine_node.name in ("w1", "w2")
        seen["killed"] = engine_node.name
        procs = _ours_node(engine_node)
        raylet = [p for p in procs if p.name() == "raylet"]
        assert raylet, "the engine node's raylet was not found"
        _kill(set(raylet))  # the raylet first: the node is gone for the GCS
        _kill(procs)  # then the rest of that machine (workers, agents, vLLM's processes)

    train(cfg, progress=False, on_step=on_step)
    rows = _rows(cfg)
    assert seen.get("fleets") == ["inference", "sandbox", "trainer"]
    killed = nodes[str(seen["killed"])]
    spare = nodes["w2" if killed.name == "w1" else "w1"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # each step once, none lost
    assert all(r["trajectories"] == 64 for r in rows)  # every step on whole groups
    # (the loss is found by the collector or by the next weight push, whichever comes first:
    # that the engine now lives on the spare node is the proof it was replaced)
    after = seen["engine_after"]
    assert after
    assert set(after.values()) == {spare.node_id}  # type: ignore[union-attr]
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert killed.node_id not in alive


@pytest.mark.skipif(INNER, reason="the inner process runs the tests themselves")
def test_in_a_fresh_driver_process(sft_model: Path) -> None:
    """This module's tests, in a pytest process of their own (see INNER_ENV): both must pass."""
    env = {**os.environ, INNER_ENV: "1", "DOCKYARD_TEST_SFT_MODEL": str(sft_model)}
    env.pop("RAY_AUTH_MODE", None)  # what Ray set in this process is not the new driver's
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", __file__,
           "-k", "not test_in_a_fresh_driver_process"]  # fmt: skip
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1500)
    out = r.stdout[-12000:] + r.stderr[-4000:]
    assert r.returncode == 0, out
    assert "2 passed" in r.stdout, out
