"""One FSDP2 training step through the torch worker, for tests/gpu/test_fsdp.py (torchrun job).

Usage: ``python -m torch.distributed.run --nproc_per_node=N _fsdp_job.py OUT MODEL CONFIG_JSON``.
Joins an ``nccl`` process group (``gloo`` without CUDA) of N ranks, one GPU each, *before*
building the worker, so that FSDP shards even at N = 1. Trains one step on
:func:`dockyard.torch.testing.random_batch` ``(8, 64, seed=5)`` and writes, from rank 0: the
metrics and facts (``results.json``), the worker's bucketed export (``exported.safetensors``)
and the full state dict gathered by ``torch.distributed.checkpoint`` (``full.safetensors``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors.numpy import save_file

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker


def main() -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor import DTensor

    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device)
    worker = TorchPolicyWorker({**config, "model_name": model, "fsdp": {"enabled": True}})
    metrics = worker.train_step(random_batch(8, 64, seed=5), PolicyLoss())
    exported = {k: v for b in worker.export_weights(1 << 20) for k, v in b.items()}
    full = get_model_state_dict(
        worker.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    results = {
        "metrics": metrics,
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "fsdp": worker.fsdp,
        "device": str(worker.device),
        "dtensor_params": sum(isinstance(p, DTensor) for p in worker.model.parameters()),
        "params": sum(1 for _ in worker.model.parameters()),
    }
    if dist.get_rank() == 0:
        assert all(isinstance(v, torch.Tensor) for v in full.values())
        tensors = {k: v.float().numpy() for k, v in full.items() if isinstance(v, torch.Tensor)}
        save_file(
            {k: np.ascontiguousarray(v) for k, v in exported.items()},
            str(out / "exported.safetensors"),
        )
        save_file(tensors, str(out / "full.safetensors"))
        (out / "results.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
