"""The vLLM worker extension: loads weight updates inside vLLM's worker process.

vLLM mixes this class into its worker (``worker_extension_cls``); the engine adapter reaches its
methods through ``collective_rpc``. The receiver is rebuilt here from its picklable ``spec`` so the
bytes land in the process that holds the model (on GPUs, NCCL broadcasts straight into device
memory). Loading goes through vLLM's layerwise reload (``initialize_layerwise_reload`` ->
``model.load_weights`` per bucket -> ``finalize_layerwise_reload``), which re-runs the kernel
weight processing (e.g. the CPU backend's repacked linear weights) after the new values arrive.

Do not import this module outside a vLLM worker: it needs torch and vllm.
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch


class DockyardWorkerExtension:
    """Methods added to vLLM's worker; ``self`` is the worker (``self.model_runner``...)."""

    _dockyard_receivers: dict[str, Any]

    def _dockyard_receiver(self, spec: dict[str, Any]) -> Any:
        from dockyard.serve.transports import open_receiver

        spec = dict(spec)
        if spec.pop("ephemeral", False):  # a one-off relay channel: not kept
            rx = open_receiver(spec)
            rx.open()  # type: ignore[attr-defined]
            return rx
        cache = self.__dict__.setdefault("_dockyard_receivers", {})
        key = json.dumps(spec, sort_keys=True)
        if key not in cache:
            cache[key] = open_receiver(spec)
            if hasattr(cache[key], "open"):
                cache[key].open()
        return cache[key]

    def dockyard_open_receiver(self, spec: dict[str, Any]) -> bool:
        """Open (bind / rendezvous) a receiver ahead of the first update."""
        self._dockyard_receiver(spec)
        return True

    def dockyard_receive(self, spec: dict[str, Any], version: int) -> dict[str, Any]:
        """Receive one update through the receiver described by ``spec`` and load it.

        Returns ``{"buckets", "tensors", "bytes", "seconds"}``. Raises if the update carries a
        different version than ``version`` (a stale or out-of-order update).
        """
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        from dockyard.serve.transports.torch_dtypes import from_numpy

        rx = self._dockyard_receiver(spec)
        ephemeral = bool(spec.get("ephemeral"))
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        t0 = time.perf_counter()
        stats = {"buckets": 0, "tensors": 0, "bytes": 0}
        with set_current_vllm_config(self.vllm_config), torch.no_grad():  # type: ignore[attr-defined]
            initialize_layerwise_reload(model)
            try:
                if hasattr(rx, "receive_torch"):
                    items = ((h.version, t) for h, t in rx.receive_torch())
                else:
                    items = (
                        (b.version, {k: from_numpy(v) for k, v in b.tensors.items()})
                        for b in rx.receive()
                    )
                for got_version, tensors in items:
                    if got_version != version:
                        raise RuntimeError(
                            f"weight update carries version {got_version}, the engine expected {version}"
                        )
                    # Own the memory: layerwise reload may hold tensors until a layer is complete.
                    weights = [(k, t.to(device, copy=True)) for k, t in tensors.items()]
                    model.load_weights(weights)
                    stats["buckets"] += 1
                    stats["tensors"] += len(weights)
                    stats["bytes"] += sum(t.numel() * t.element_size() for _, t in weights)
            finally:
                finalize_layerwise_reload(model, self.model_runner.model_config)  # type: ignore[attr-defined]
                if ephemeral:
                    rx.close()
        stats["seconds"] = time.perf_counter() - t0
        return stats

    def dockyard_param_digest(self, names: list[str]) -> dict[str, float]:
        """``{name: float(sum)}`` of the named (vLLM-side) parameters, for tests."""
        params = dict(self.model_runner.get_model().named_parameters())  # type: ignore[attr-defined]
        return {n: float(params[n].double().sum()) for n in names if n in params}
