"""``policy.dtensor_cfg.cpu_offload``: mapped to ``fsdp.cpu_offload``, passed to FSDP2 as
``CPUOffloadPolicy`` on CUDA (a gloo backend beside NCCL), refused by a CUDA process without FSDP,
and a no-op on CPU. These machines have no GPU: the CUDA cases use a CUDA ``DistInfo`` and a
recording ``fully_shard``; a real FSDP2 offload run needs a GPU job."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy

from dockyard.core.config import config_from_dict
from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch import model as model_mod
from dockyard.torch.config import TorchPolicyConfig
from dockyard.torch.model import DistInfo, fsdp_kwargs, process_group_backend, use_fsdp
from dockyard.torch.parallel import MeshInfo
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker
from dockyard.train.algorithms.configs import torch_worker_config

CUDA = torch.device("cuda", 0)
TWO_RANKS = MeshInfo(2, 1, 0, 0, {"dp": "the dp mesh"})


def _cfg(offload: bool, **fsdp) -> TorchPolicyConfig:
    return TorchPolicyConfig.model_validate(
        {"model_name": "/m", "fsdp": {"cpu_offload": offload, **fsdp}}
    )


def test_the_core_key_reaches_the_worker_config() -> None:
    master = config_from_dict({"policy": {"dtensor_cfg": {"cpu_offload": True}}})
    assert TorchPolicyConfig(**torch_worker_config(master)).fsdp.cpu_offload
    assert not TorchPolicyConfig(**torch_worker_config(config_from_dict({}))).fsdp.cpu_offload


def test_fully_shard_gets_the_offload_policy_on_cuda_only() -> None:
    on_gpu = fsdp_kwargs(_cfg(True), DistInfo(0, 2, CUDA, TWO_RANKS))
    assert isinstance(on_gpu["offload_policy"], CPUOffloadPolicy)
    assert on_gpu["mesh"] == "the dp mesh"
    assert "offload_policy" not in fsdp_kwargs(_cfg(False), DistInfo(0, 2, CUDA, TWO_RANKS))
    on_cpu = fsdp_kwargs(_cfg(True), DistInfo(0, 2, torch.device("cpu"), TWO_RANKS))
    assert "offload_policy" not in on_cpu  # parameters already live in CPU memory


def test_shard_model_passes_it_to_every_layer_and_the_root(monkeypatch, qwen2_path) -> None:
    import torch.distributed.fsdp as fsdp

    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda m, **kw: calls.append((type(m).__name__, kw)))
    cfg = TorchPolicyConfig.model_validate(
        {"model_name": str(qwen2_path), "fsdp": {"cpu_offload": True}}
    )
    model = model_mod.load_hf_model(cfg, torch.device("cpu"))
    model_mod.shard_model(model, DistInfo(0, 2, CUDA, TWO_RANKS), cfg, fsdp=True)
    layers = model_mod.decoder_layers(model)
    assert len(calls) == len(layers) + 1
    assert calls[-1][0] == type(model).__name__
    assert all(isinstance(kw["offload_policy"], CPUOffloadPolicy) for _, kw in calls)


def test_offload_adds_gloo_beside_nccl() -> None:
    assert process_group_backend(cuda=True, cpu_offload=True) == "cpu:gloo,cuda:nccl"
    assert process_group_backend(cuda=True) == "nccl"
    assert process_group_backend(cuda=False, cpu_offload=True) == "gloo"


def test_a_cuda_process_without_fsdp_refuses_it() -> None:
    one = DistInfo(0, 1, CUDA)
    with pytest.raises(ValueError, match=r"policy\.dtensor_cfg\.cpu_offload.*without FSDP"):
        use_fsdp(_cfg(True), one)
    assert use_fsdp(_cfg(False), one) is False
    assert use_fsdp(_cfg(True), DistInfo(0, 2, CUDA, TWO_RANKS)) is True


def test_a_cpu_worker_accepts_it_and_trains(base_config) -> None:
    worker = TorchPolicyWorker({**base_config, "fsdp": {"cpu_offload": True}})
    metrics = worker.train_step(random_batch(4, 16, seed=1), MaskedNLLLoss())
    assert np.isfinite(metrics["loss"])
    assert all(p.device.type == "cpu" for p in worker.model.parameters())
