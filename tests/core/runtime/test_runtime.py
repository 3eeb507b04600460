"""The Ray runtime: node roles, placement groups, failure detection and restart (real Ray)."""

from __future__ import annotations

import os
import signal

import pytest

from dockyard.core.runtime.cluster import fleet_roles, node_resources
from dockyard.core.runtime.fleets import FleetSpec


def test_fleet_roles_parse_and_reject() -> None:
    assert fleet_roles("") == ("trainer", "inference", "sandbox")
    assert fleet_roles("trainer, sandbox") == ("trainer", "sandbox")
    assert node_resources(("inference",)) == {"fleet:inference": 1000.0}
    with pytest.raises(ValueError, match="DOCKYARD_FLEET_ROLE"):
        fleet_roles("trainer,gpu")


def test_bundles_name_the_role() -> None:
    assert FleetSpec("trainer", size=2, cpus=1).bundles() == [{"fleet:trainer": 1.0, "CPU": 1}] * 2
    assert FleetSpec("sandbox", cpus=0).bundles() == [{"fleet:sandbox": 1.0}]


class Echo:
    def pid(self) -> int:
        return os.getpid()


@pytest.mark.slow
def test_fleet_detects_a_killed_actor_and_restarts_it() -> None:
    ray = pytest.importorskip("ray")
    from dockyard.core.runtime.cluster import init_ray
    from dockyard.core.runtime.fleets import Fleet

    init_ray(None)
    try:
        fleet = Fleet(FleetSpec("inference", size=1, cpus=0.5), Echo, lambda i: ((), {}))
        pid = ray.get(fleet.actors[0].pid.remote())
        os.kill(pid, signal.SIGKILL)
        assert not fleet.alive(0, timeout_s=30)
        fleet.restart(0)
        assert fleet.alive(0)
        assert ray.get(fleet.actors[0].pid.remote()) != pid
        assert fleet.restarts == 1
        fleet.shutdown()
    finally:
        ray.shutdown()
