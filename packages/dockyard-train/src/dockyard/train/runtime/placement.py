"""Fleets: groups of Ray actors with a placement group each, and their failure handling.

Each fleet's placement group strategy comes from ``cluster.placement`` (:func:`strategies`;
``SPREAD``, ``PACK``, ``STRICT_PACK`` or ``STRICT_SPREAD``); the defaults:

=========  ===========  ==============================================================
fleet      strategy     why
=========  ===========  ==============================================================
trainer    ``SPREAD``   one bundle per rank; ranks spread over the trainer nodes
inference  ``PACK``     an engine's bundles stay on one node (tensor parallelism)
sandbox    ``SPREAD``   CPU-only nodes; services need no accelerator
=========  ===========  ==============================================================

Each bundle asks for the node resource ``fleet:<role>`` (see :mod:`.cluster`), so on a
multi-node cluster whose nodes set ``DOCKYARD_FLEET_ROLE`` each fleet lands on its own nodes.

A :class:`Fleet` calls a method on every member (:meth:`Fleet.call`), detects a dead actor
(``RayActorError``), and restarts it in its bundle with the same constructor arguments
(:meth:`Fleet.restart`); the caller decides what to replay (re-send weights, re-queue work).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.util.placement_group import placement_group as _pg
from ray.util.placement_group import remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from dockyard.core.config import PlacementConfig
from dockyard.train.runtime.cluster import require_ray

DEFAULT_STRATEGIES = {"trainer": "SPREAD", "inference": "PACK", "sandbox": "SPREAD"}
"""Each role's strategy when a fleet is built without a config (``cluster.placement``'s
defaults)."""


def strategies(placement: PlacementConfig | None) -> dict[str, str]:
    """Role -> Ray placement strategy from ``cluster.placement`` (None: the defaults)."""
    if placement is None:
        return dict(DEFAULT_STRATEGIES)
    return {
        "trainer": placement.trainer,
        "inference": placement.inference,
        "sandbox": placement.sandbox,
    }


@dataclass
class FleetSpec:
    """What one fleet needs.

    Attributes:
        role: ``trainer``, ``inference`` or ``sandbox``.
        size: number of actors.
        cpus: CPUs per actor (fractions allowed: actors on a laptop share cores).
        gpus: GPUs per actor.
        env: environment variables for the actors' processes.
    """

    role: str
    size: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    """The placement group's name (None: ``dockyard-<role>``): a second fleet of a role
    (a judge's engines beside the policy's) needs its own."""
    strategy: str | None = None
    """Ray placement strategy (None: the role's default, :data:`DEFAULT_STRATEGIES`); the
    runtime sets it from ``cluster.placement`` (:func:`strategies`)."""

    @property
    def placement_strategy(self) -> str:
        return self.strategy or DEFAULT_STRATEGIES[self.role]

    def bundles(self) -> list[dict[str, float]]:
        b: dict[str, float] = {f"fleet:{self.role}": 1.0}
        if self.cpus:
            b["CPU"] = self.cpus
        if self.gpus:
            b["GPU"] = self.gpus
        return [dict(b) for _ in range(self.size)]


def placement_group(spec: FleetSpec, timeout_s: float = 120.0) -> Any:
    """Reserve ``spec``'s bundles with its role's strategy; fails clearly when they don't fit."""
    ray = require_ray()
    strategy = spec.placement_strategy
    pg = _pg(spec.bundles(), strategy=strategy, name=spec.name or f"dockyard-{spec.role}")
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        avail = ray.available_resources()
        raise RuntimeError(
            f"the {spec.role} fleet cannot be placed: {spec.size} × {spec.bundles()[0]} with "
            f"strategy {strategy} (cluster.placement.{spec.role}), but the cluster has {avail}. "
            "Lower the fleet size or CPUs per actor, relax the strategy (STRICT_SPREAD needs a "
            f"node per actor), or add nodes with DOCKYARD_FLEET_ROLE={spec.role}"
        )
    return pg


def on_driver_node() -> Any:
    """A scheduling strategy pinning an actor to the driver's node (its Ray node: the head
    when the driver runs there). For the run's own actors without a fleet (the collector, the
    replay buffer): they need no resources, so Ray could put them on any node, and a lost
    worker node would take the run's state with it; the driver's node goes only with the run."""
    ray = require_ray()
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


class Fleet:
    """Actors of one class in one placement group (see the module docstring).

    Args:
        spec: the fleet's shape.
        cls: the actor class (a plain class; wrapped with ``ray.remote`` here).
        make_args: ``index -> (args, kwargs)`` for member ``index``'s constructor.
        max_concurrency: concurrent calls per actor (async actors).
    """

    def __init__(
        self,
        spec: FleetSpec,
        cls: type,
        make_args: Callable[[int], tuple[tuple, dict]],
        *,
        max_concurrency: int | None = None,
    ) -> None:
        self.ray = require_ray()
        self.spec = spec
        self.pg = placement_group(spec)
        self._remote_cls = self.ray.remote(cls)
        self._make_args = make_args
        self._max_concurrency = max_concurrency
        self.restarts = 0
        self.actors = [self._start(i) for i in range(spec.size)]

    def _start(self, index: int) -> Any:
        args, kwargs = self._make_args(index)
        opts: dict[str, Any] = {
            "num_cpus": self.spec.cpus,
            "num_gpus": self.spec.gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=index
            ),
            "runtime_env": {"env_vars": dict(self.spec.env)} if self.spec.env else None,
        }
        if self._max_concurrency:
            opts["max_concurrency"] = self._max_concurrency
        return self._remote_cls.options(**opts).remote(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method`` on every member; returns their ObjectRefs in member order."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def alive(self, index: int, timeout_s: float = 30.0) -> bool:
        """Whether member ``index`` answers a ``__ray_ready__`` ping."""
        try:
            self.ray.get(self.actors[index].__ray_ready__.remote(), timeout=timeout_s)
            return True
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            return False

    def dead(self, index: int, timeout_s: float = 30.0) -> bool:
        """Whether Ray reports member ``index`` dead (a slow answer is not death)."""
        try:
            self.ray.get(self.actors[index].__ray_ready__.remote(), timeout=timeout_s)
        except self.ray.exceptions.RayActorError:
            return True
        except self.ray.exceptions.GetTimeoutError:
            pass
        return False

    def restart(self, index: int) -> Any:
        """Kill (if needed) and start member ``index`` again in its bundle; returns the handle."""
        with contextlib.suppress(Exception):  # already gone
            self.ray.kill(self.actors[index], no_restart=True)
        # the bundle's resources come back asynchronously after the kill
        deadline = time.monotonic() + 30.0
        while True:
            self.actors[index] = self._start(index)
            try:
                self.ray.get(self.actors[index].__ray_ready__.remote(), timeout=300)
                break
            except self.ray.exceptions.RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.restarts += 1
        return self.actors[index]

    def restart_all(self) -> list[Any]:
        """Kill every member, then start each again in its bundle (a fleet whose members
        depend on each other, like trainer ranks in one process group: a survivor would wait
        in a collective for the dead one). Returns the new handles."""
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(a, no_restart=True)
        for i in range(len(self.actors)):
            self.restart(i)
        return list(self.actors)

    def shutdown(self) -> None:
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(a, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(self.pg)
