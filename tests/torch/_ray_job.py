"""TorchPolicyWorker inside a real Ray actor (1 CPU), for tests/torch/test_ray_actor.py.

Usage: ``python _ray_job.py OUT MODEL CONFIG_JSON``. Starts its own local Ray (2 CPUs, no dashboard) through
``dockyard.train.runtime.cluster.init_ray``, places the worker the way the runtime does (a
``PolicyHost`` actor building it from ``"dockyard.torch.worker:TorchPolicyWorker"``), computes
logprobs, trains one step, computes logprobs again, exports an HF folder from the actor, and
shuts Ray down. Writes ``results.json``, ``lp0.npy``, ``lp1.npy`` and ``hf/`` under OUT.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import random_batch
from dockyard.train.runtime.cluster import init_ray
from dockyard.train.runtime.hosts import PolicyHost


def main() -> None:
    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    init_ray(SimpleNamespace(cpus_per_node=2))
    import ray

    try:
        host = ray.remote(num_cpus=1)(PolicyHost).remote(
            "dockyard.torch.worker:TorchPolicyWorker", {**config, "model_name": model}, threads=1
        )
        batch = random_batch(8, 24, seed=1)
        lp0 = ray.get(host.get_logprobs.remote(batch), timeout=600)
        ref = ray.get(host.get_reference_logprobs.remote(batch), timeout=600)
        metrics = ray.get(host.train_step.remote(batch, PolicyLoss(options={"eps_low": 0.2})))
        lp1 = ray.get(host.get_logprobs.remote(batch), timeout=600)
        ray.get(host.export_to.remote(str(out / "hf")), timeout=600)
        results = {
            "metrics": metrics,
            "step": ray.get(host.step.remote()),
            "actor_pid": ray.get(host.__ray_call__.remote(lambda _self: os.getpid())),
            "driver_pid": os.getpid(),
            "ref_equals_lp0": bool(np.array_equal(ref, lp0)),
        }
    finally:
        ray.shutdown()
    np.save(out / "lp0.npy", lp0)
    np.save(out / "lp1.npy", lp1)
    (out / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
