"""Qwen3-MoE on CUDA: grouped-GEMM experts against the per-expert loop at a realistic size
(bf16, forward and backward, with the speed-up), and the bf16 worker's logprobs on a small
Qwen3-MoE against transformers in float32.

Under ``DOCKYARD_GPU_TESTS_ON_CPU=1`` the same bodies run on CPU with smaller shapes.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss

torch = pytest.importorskip("torch")
moe_experts = pytest.importorskip("dockyard.torch.moe.experts", reason="dockyard-torch missing")

pytestmark = pytest.mark.gpu

SMALL_MOE = {
    "family": "qwen3_moe", "hidden_size": 256, "num_layers": 4, "num_heads": 4,
    "num_kv_heads": 2, "num_experts": 16, "num_experts_per_tok": 4,
    "moe_intermediate_size": 128, "vocab_size": 1024,
}  # fmt: skip


def _time(fn, repeats: int = 5) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / repeats


def test_grouped_gemm_equals_loop_bf16(device, gpu_report) -> None:
    """64 experts, top-8 of 4096 tokens, H 1024, I 512 (CPU: 16 experts, 512 rows, H 128)."""
    big = device == "cuda"
    e, m, h, i = (64, 4096 * 8, 1024, 512) if big else (16, 512, 128, 64)
    g = torch.Generator().manual_seed(0)
    counts = torch.multinomial(torch.ones(e), m, replacement=True, generator=g).bincount(
        minlength=e
    )
    x = torch.randn(m, h, generator=g).to(device, torch.bfloat16)
    gu = (torch.randn(e, 2 * i, h, generator=g) * h**-0.5).to(device, torch.bfloat16)
    down = (torch.randn(e, h, i, generator=g) * i**-0.5).to(device, torch.bfloat16)
    act = torch.nn.functional.silu
    outs, grads, times = {}, {}, {}
    for name, ffn in (("grouped", moe_experts.grouped_ffn), ("loop", moe_experts.loop_ffn)):
        w = [gu.clone().requires_grad_(), down.clone().requires_grad_()]

        def step(ffn=ffn, w=w):
            y = ffn(x, counts.to(device), w[0], w[1], act)
            y.float().square().mean().backward()
            return y

        outs[name] = step().float()
        grads[name] = [t.grad.float() for t in w]
        times[name] = _time(step)
    err = float((outs["grouped"] - outs["loop"]).abs().max())
    scale = float(outs["loop"].abs().max())
    gerr = max(float((a - b).abs().max() / b.abs().max()) for a, b in
               zip(grads["grouped"], grads["loop"], strict=True))  # fmt: skip
    gpu_report("moe_grouped_gemm", {
        "experts": e, "rows": m, "hidden": h, "intermediate": i,
        "max_abs_err": err, "out_scale": scale, "grad_rel_err": gerr,
        "grouped_ms": times["grouped"] * 1e3, "loop_ms": times["loop"] * 1e3,
        "speedup": times["loop"] / times["grouped"],
    })  # fmt: skip
    assert err <= 2e-2 * scale
    assert gerr <= 3e-2


def test_bf16_moe_worker_matches_hf_fp32(
    device, numerics_batch, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """The bf16 worker (grouped GEMM, bias 0) on a small Qwen3-MoE against HF fp32; one train
    step runs and reports router metrics."""
    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker

    path = build_tiny_model(**SMALL_MOE)
    want = hf_logprobs(path, numerics_batch, device)
    worker = TorchPolicyWorker({
        "model_name": str(path), "precision": "bfloat16", "reference_policy": False,
        "logprob_batch_size": 4,
    })  # fmt: skip
    got = worker.get_logprobs(numerics_batch)
    mean, worst = logprob_errors(got, want, numerics_batch)
    m = worker.train_step(numerics_batch, PolicyLoss())
    gpu_report("moe_bf16_logprobs", {
        "mean_abs": mean, "max_abs": worst, "load_imbalance": m["moe/load_imbalance"],
        "step_s": m["step_time_s"],
    })  # fmt: skip
    assert mean < 2e-2
    assert worst < 0.2
    assert np.isfinite(m["loss"])
    assert m["moe/dropped_tokens"] == 0


def test_jax_bf16_moe_worker_matches_hf_fp32_and_balances(
    jax_gpu, device, numerics_batch, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """The JAX worker in bf16 on the same small Qwen3-MoE (grouped ragged_dot experts, bias 0
    at the start) against HF fp32; two steps with every balancing option on (aux-loss-free
    bias, aux loss, capacity 1.25) report their router metrics, and with more than one device
    JAX sees, expert parallelism over all of them equals one device's logprobs."""
    import jax

    from dockyard.jax import JaxPolicyWorker
    from dockyard.jax.sharding import make_mesh
    from dockyard.torch.testing import build_tiny_model

    path = build_tiny_model(**SMALL_MOE)
    want = hf_logprobs(path, numerics_batch, "cpu")
    moe = {"router_bias_update_rate": 1e-3, "router_load_balancing_type": "aux_loss",
           "aux_loss_coeff": 1e-3, "expert_capacity_factor": 1.25}  # fmt: skip
    cfg = {"model_name": str(path), "precision": "bfloat16", "reference_policy": False,
           "logprob_batch_size": 4, "pad_to_multiple": 64, "moe": moe}  # fmt: skip
    devices = jax.devices()
    worker = JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices[:1]))
    got = worker.get_logprobs(numerics_batch)
    mean, worst = logprob_errors(got, want, numerics_batch)
    metrics = [worker.train_step(numerics_batch, PolicyLoss()) for _ in range(2)]
    report = {"mean_abs": mean, "max_abs": worst, "devices": len(devices),
              "load_imbalance": [m["moe/load_imbalance"] for m in metrics],
              "dropped_frac": [m["moe/dropped_frac"] for m in metrics],
              "aux_loss": [m["moe/aux_loss"] for m in metrics],
              "step_s": [m["step_time_s"] for m in metrics]}  # fmt: skip
    ep = len(devices)
    if ep > 1 and SMALL_MOE["num_experts"] % ep == 0:
        parallel = JaxPolicyWorker({**cfg, "moe": {**moe, "expert_parallel_size": ep}},
                                   mesh=make_mesh(ep, 1, devices))  # fmt: skip
        single = JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices[:1]))
        diff = np.abs(parallel.get_logprobs(numerics_batch) - single.get_logprobs(numerics_batch))
        report["ep_max_abs_vs_one_device"] = float(diff.max())
        assert report["ep_max_abs_vs_one_device"] < 5e-2  # bf16 sums in another order
    gpu_report("jax_moe_bf16", report)
    assert mean < 2e-2
    assert worst < 0.2
    assert all(np.isfinite(m["loss"]) and m["moe/aux_loss"] > 0 for m in metrics)
    assert metrics[1]["moe/expert_bias_absmean"] > 0
