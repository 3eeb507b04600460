"""The LLM judge's engine fleet: vLLM engines as Ray actors (the policy's engine actor,
:class:`~dockyard.train.runtime.hosts.EngineHost`, without weight updates) in their own
placement group, for the judge component (:mod:`dockyard.train.judge`) to grade through."""

from __future__ import annotations

import contextlib
from typing import Any

import ray

from dockyard.serve.config import EngineConfig
from dockyard.train.runtime.hosts import ENGINE_FACTORY, EngineHost
from dockyard.train.runtime.placement import Fleet, FleetSpec


def start_judge_fleet(model: str, num_engines: int = 1, *, gpus: float = 0.0, cpus: float = 1.0,
                      seed: int = 0, max_model_len: int | None = None,
                      strategy: str | None = None) -> Any:  # fmt: skip
    """A fleet of ``num_engines`` vLLM engines serving ``model`` as Ray actors — the policy's
    engine actor (``EngineHost``) in an inference placement group, without weight updates.
    Ray must be initialised; returns the started :class:`~dockyard.train.runtime.placement.Fleet`
    (``fleet.actors`` for :class:`EngineBackend`; ``fleet.call("shutdown")`` then
    ``fleet.shutdown()``: :func:`stop_judge_fleet`). ``strategy``: the placement strategy
    (``cluster.placement.inference``; None: the inference default)."""
    options: dict[str, Any] = {"seed": seed, "enforce_eager": not gpus}
    if max_model_len:
        options["max_model_len"] = max_model_len
    engines = EngineConfig(backend="vllm", model=model, initial_version=0, num_engines=num_engines, gpus=gpus,
                           options=options)  # fmt: skip
    spec = FleetSpec("inference", size=num_engines, cpus=cpus, gpus=gpus, name="dockyard-judge",
                     strategy=strategy)  # fmt: skip
    kwargs = engines.engine_kwargs()
    fleet = Fleet(spec, EngineHost, lambda i: ((ENGINE_FACTORY, kwargs), {}), max_concurrency=1000)
    try:
        ray.get(fleet.call("ready"))
    except BaseException:
        stop_judge_fleet(fleet)  # what did start must not outlive a failed start
        raise
    return fleet


def stop_judge_fleet(fleet: Any, timeout_s: float = 30.0) -> None:
    """Stop a :func:`start_judge_fleet` fleet: its engines (their processes and shared memory),
    then its actors and placement group."""
    with contextlib.suppress(Exception):
        ray.get(fleet.call("shutdown"), timeout=timeout_s)
    fleet.shutdown()
