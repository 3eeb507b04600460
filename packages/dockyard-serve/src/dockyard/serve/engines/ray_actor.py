"""Any engine as a Ray actor: ``engine_actor("vllm", model, **kwargs)``.

The actor is asynchronous (one event loop in the actor process), so generation requests and a
weight update interleave inside it exactly as they do in a local engine. Receivers are pickled
into the actor (they are descriptions until opened; see ``dockyard.serve.transports``).

Needs ``ray`` (``pip install "dockyard-core[ray]"``).
"""

from __future__ import annotations

from typing import Any

from dockyard.core.interfaces import GenerationResult, SamplingParams, WeightReceiver


class EngineActor:
    """The actor body: holds one engine and forwards the GenerationEngine calls."""

    def __init__(self, backend: str, *args: Any, **kwargs: Any) -> None:
        from dockyard.serve.engines import engine_class

        self.engine = engine_class(backend)(*args, **kwargs)

    async def start(self) -> bool:
        await self.engine.start()
        return True

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams
    ) -> list[GenerationResult]:
        return await self.engine.generate(prompt_token_ids, params)

    async def pause(self, mode: str = "keep") -> None:
        await self.engine.pause(mode)

    async def resume(self) -> None:
        await self.engine.resume()

    async def update_weights(self, receiver: WeightReceiver, version: int) -> dict[str, Any]:
        await self.engine.update_weights(receiver, version)
        return dict(getattr(self.engine, "last_update", {}))

    async def policy_version(self) -> int:
        return self.engine.policy_version

    async def shutdown(self) -> None:
        self.engine.shutdown()


def engine_actor(
    backend: str, *args: Any, actor_options: dict[str, Any] | None = None, **kwargs: Any
) -> Any:
    """Start an :class:`EngineActor` (``actor_options``: Ray's ``.options(...)``, e.g.
    ``{"num_gpus": 1}``); call ``actor.start.remote()`` before generating."""
    try:
        import ray
    except ImportError as e:
        raise ImportError('engine actors need Ray: pip install "dockyard-core[ray]"') from e
    cls = ray.remote(EngineActor)
    return cls.options(**(actor_options or {})).remote(backend, *args, **kwargs)
