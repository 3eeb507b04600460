"""Every fleet's actors run on the threads the rule gives them (``hosts.fleet_threads`` and
``hosts.thread_count``): torch's pools and ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` inside real
Ray actors, with and without a ``cpus`` binding. Ray alone sets ``OMP_NUM_THREADS`` to an
actor's Ray CPUs rounded down (1 here), whatever cores the actor may use."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from dockyard.train.runtime.hosts import fleet_threads, thread_count

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

CORES = sorted(os.sched_getaffinity(0))


def probe() -> dict[str, Any]:
    """What this process runs on, seen from the calling thread."""
    import torch

    return {
        "torch": torch.get_num_threads(),
        "interop": torch.get_num_interop_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "mkl": os.environ.get("MKL_NUM_THREADS"),
        "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "wait": os.environ.get("OMP_WAIT_POLICY"),
        "cores": sorted(os.sched_getaffinity(0)),
    }


class ProbeWorker:
    """A stand-in policy worker that imports torch when built, as the torch worker does; its
    ``get_logprobs`` reports the threads instead (run on the actor's task thread)."""

    step = 0

    def __init__(self, config: dict[str, Any], **rank: int) -> None:
        import torch  # noqa: F401

    def get_logprobs(self, batch: Any) -> dict[str, Any]:
        return probe()


class ProbeEngine:
    """A stand-in engine: its work runs in the engine actor's event-loop thread, as the
    transformers engine's token loop does; ``generate`` reports the threads there."""

    async def start(self) -> None:
        import torch  # noqa: F401

    async def generate(self, prompt_ids: list[int], params: Any) -> dict[str, Any]:
        return probe()


def probe_worker(config: dict[str, Any], **rank: int) -> ProbeWorker:
    return ProbeWorker(config, **rank)


def probe_engine() -> ProbeEngine:
    return ProbeEngine()


def test_the_rule() -> None:
    """Bound: the host counts its bound cores (None); one actor of a CPU fleet that takes
    turns with the other: the host counts the cores it may run on (None); otherwise its Ray
    CPUs, rounded down."""
    assert fleet_threads("0-1", 1.0, overlap=True) is None
    assert fleet_threads(None, 1.0, overlap=False) is None
    assert fleet_threads(None, 1.0, overlap=True) == 1
    assert fleet_threads(None, 3.5, overlap=True) == 3
    assert fleet_threads(None, 0.5, overlap=False, size=2) == 1  # 2 ranks on the trainer's share
    assert fleet_threads(None, 1.0, overlap=False, gpus=True) == 1
    assert thread_count(3) == 3
    assert 1 <= thread_count() <= len(CORES)


@pytest.fixture(scope="module")
def local_ray():
    from dockyard.train.runtime.cluster import init_ray

    init_ray(SimpleNamespace(cpus_per_node=2))
    yield ray
    ray.shutdown()


def _host(cls: type, *args: Any, **kwargs: Any) -> Any:
    """An actor of ``cls`` on a quarter of a Ray CPU (all of them fit at once; Ray's own
    ``OMP_NUM_THREADS`` for it is 1)."""
    return ray.remote(cls).options(num_cpus=0.25).remote(*args, **kwargs)


@pytest.mark.slow
def test_hosts_set_the_threads_in_ray_actors(local_ray) -> None:
    from dockyard.train.runtime.hosts import EngineHost, PolicyHost

    worker, engine = f"{__name__}:probe_worker", f"{__name__}:probe_engine"
    one = str(CORES[0])
    cases: dict[str, tuple[Any, Any, int, list[int]]] = {}

    def policy(name: str, expect: int, cores: list[int], **kw: Any) -> None:
        actor = _host(PolicyHost, worker, {}, **kw)
        cases[name] = (actor, actor.get_logprobs.remote(None), expect, cores)

    def engine_host(name: str, expect: int, cores: list[int], **kw: Any) -> None:
        actor = _host(EngineHost, engine, {}, **kw)
        ready = actor.ready.remote()
        cases[name] = (actor, [ready, actor.generate.remote([1], None)], expect, cores)

    everything = thread_count()  # the driver's cores: an unbound actor may use the same
    policy("trainer, unbound", everything, CORES)
    policy("trainer, async share", 1, CORES, threads=fleet_threads(None, 1.0, overlap=True))
    policy("trainer, async share of two", 2, CORES, threads=2)  # e.g. 2 Ray CPUs, overlapping
    policy("trainer, bound to one core", 1, [int(one)], cpus=one)
    policy("trainer, rank 0 of 2", 1, CORES, world_size=2)  # the ranks compute at once
    engine_host("engine, unbound", max(1, everything - 1), CORES)  # one for its front end
    engine_host("engine, bound to one core", 1, [int(one)], cpus=one)
    if len(CORES) >= 2:
        two = f"{CORES[0]},{CORES[1]}"
        policy("trainer, bound to two cores", 2, CORES[:2], cpus=two)
    try:
        for name, (_, ref, expect, cores) in cases.items():
            got = ray.get(ref, timeout=300)
            got = got[-1] if isinstance(got, list) else got
            want = {"torch": expect, "interop": expect, "omp": str(expect), "mkl": str(expect)}
            assert {k: got[k] for k in want} == want, (name, got)
            assert got["cores"] == cores, (name, got)
            # several threads on cores other work wants at once: they wait passively (not a
            # lone unbound actor of fleets that take turns: it has the cores to itself)
            passive = expect > 1 and "share" in name
            assert got["wait"] == ("PASSIVE" if passive else None), (name, got)
            if name.startswith("engine, bound"):
                assert got["bind"] == one, got  # vllm-cpu's OpenMP threads: the same core
    finally:
        for actor, *_ in cases.values():
            ray.kill(actor)


def test_wait_policy_is_the_operators_or_ours(monkeypatch) -> None:
    """A team of several threads on shared cores waits passively; a process that inherited our
    PASSIVE but should not wait passively drops it; an operator's own setting is kept."""
    from dockyard.train.runtime import hosts

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv(hosts._WAIT_MARK, raising=False)
    hosts._set_wait_policy(passive=True)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    hosts._set_wait_policy(passive=False)  # e.g. a one-thread actor started from that process
    assert "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the operator's
    hosts._set_wait_policy(passive=True)
    hosts._set_wait_policy(passive=False)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
