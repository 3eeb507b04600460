"""The Ray runtime: node roles, placement groups, failure detection and restart (real Ray)."""

from __future__ import annotations

import os
import signal

import pytest

from dockyard.train.runtime.cluster import fleet_roles, node_resources
from dockyard.train.runtime.placement import FleetSpec


def test_fleet_roles_parse_and_reject() -> None:
    assert fleet_roles("") == ("trainer", "inference", "sandbox")
    assert fleet_roles("trainer, sandbox") == ("trainer", "sandbox")
    assert node_resources(("inference",)) == {"fleet:inference": 1000.0}
    with pytest.raises(ValueError, match="DOCKYARD_FLEET_ROLE"):
        fleet_roles("trainer,gpu")


def test_bundles_name_the_role() -> None:
    assert FleetSpec("trainer", size=2, cpus=1).bundles() == [{"fleet:trainer": 1.0, "CPU": 1}] * 2
    assert FleetSpec("sandbox", cpus=0).bundles() == [{"fleet:sandbox": 1.0}]


def test_the_trainer_client_offers_every_policy_worker_operation() -> None:
    """Each ``PolicyWorker`` operation is a typed method of the client and of the rank's actor
    (the weight export travels through ``PolicyHost.send_weights`` instead)."""
    from dockyard.core.interfaces import PolicyWorker
    from dockyard.train.runtime.hosts import PolicyHost
    from dockyard.train.runtime.trainer import TrainerClient

    ops = PolicyWorker.__abstractmethods__ - {"export_weights"}
    assert ops <= set(dir(TrainerClient))
    assert ops <= set(dir(PolicyHost))
    assert hasattr(PolicyHost, "send_weights")
    assert not hasattr(PolicyHost, "call")  # no method names passed as strings


@pytest.fixture
def local_ray():
    """A local Ray for one test (the ``ray`` module), shut down after it."""
    ray = pytest.importorskip("ray")
    from dockyard.train.runtime.cluster import init_ray

    init_ray(None)
    yield ray
    ray.shutdown()


class Echo:
    def pid(self) -> int:
        return os.getpid()


@pytest.mark.slow
def test_fleet_detects_a_killed_actor_and_restarts_it(local_ray) -> None:
    from dockyard.train.runtime.placement import Fleet

    ray = local_ray
    fleet = Fleet(FleetSpec("inference", size=1, cpus=0.5), Echo, lambda i: ((), {}))
    pid = ray.get(fleet.actors[0].pid.remote())
    os.kill(pid, signal.SIGKILL)
    assert not fleet.alive(0, timeout_s=30)
    fleet.restart(0)
    assert fleet.alive(0)
    assert ray.get(fleet.actors[0].pid.remote()) != pid
    assert fleet.restarts == 1
    fleet.shutdown()


class Rank:
    """A stand-in trainer rank: ``collective`` waits for a peer that never comes."""

    def pid(self) -> int:
        return os.getpid()

    def collective(self) -> int:
        import time

        time.sleep(600)
        return 0

    def die(self) -> int:
        os._exit(1)

    def fail(self) -> int:
        raise ValueError("bad batch")


@pytest.mark.slow
def test_a_dead_rank_is_reported_while_its_peer_waits_and_the_fleet_restarts(local_ray) -> None:
    import time

    from dockyard.train.runtime.placement import Fleet
    from dockyard.train.runtime.trainer import TrainerLost, gather_ranks

    ray = local_ray
    fleet = Fleet(FleetSpec("trainer", size=2, cpus=0.25), Rank, lambda i: ((), {}))
    pids = ray.get(fleet.call("pid"))
    t0 = time.monotonic()
    # an ordinary error is raised as soon as it is known, not after the peer's wait
    with pytest.raises(ray.exceptions.RayTaskError, match="bad batch"):
        gather_ranks([fleet.actors[0].collective.remote(), fleet.actors[1].fail.remote()])
    with pytest.raises(TrainerLost, match="trainer rank 1 died") as info:
        gather_ranks([fleet.actors[0].collective.remote(), fleet.actors[1].die.remote()])
    assert info.value.rank == 1
    assert time.monotonic() - t0 < 120  # not the peer's 600 s
    fleet.restart_all()  # the waiting survivor is killed too
    new = ray.get(fleet.call("pid"))
    assert set(new).isdisjoint(pids)
    assert fleet.restarts == 2
    fleet.shutdown()


def test_fleet_cpu_binding_checks_the_cores_and_binds() -> None:
    from dockyard.core.config import config_from_dict
    from dockyard.core.config.errors import ConfigError
    from dockyard.train.runtime.hosts import bind_cpus

    assert config_from_dict({"cluster": {"trainer_cpus": 0}}).cluster.trainer_cpus == "0"
    with pytest.raises(ConfigError, match=r"cluster.inference_cpus: '1-0': range 1-0 runs"):
        config_from_dict({"cluster": {"inference_cpus": "1-0"}})
    before = os.sched_getaffinity(0)
    core = min(before)
    try:
        assert bind_cpus(str(core), "cluster.trainer_cpus") == [core]
        assert os.sched_getaffinity(0) == {core}
        with pytest.raises(ValueError, match=r"cluster.trainer_cpus='4096'.*not available"):
            bind_cpus("4096", "cluster.trainer_cpus")
    finally:
        os.sched_setaffinity(0, before)
