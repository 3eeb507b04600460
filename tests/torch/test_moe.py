"""Qwen3-MoE in the torch worker: HF parity, grouped GEMM = loop, routing math, step metrics.

The tiny model is ``build_tiny_model(family="qwen3_moe")``: 2 layers, 8 experts of width 32,
top-2, hidden 64 (tests/torch/conftest.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dockyard.core.rl import MaskedNLLLoss, PolicyLoss
from dockyard.torch.config import MoEConfig
from dockyard.torch.moe import MoEBlock, install_moe, moe_blocks
from dockyard.torch.moe.experts import check_grouped_shapes, grouped_ffn, loop_ffn
from dockyard.torch.moe.routing import bias_update, route, switch_aux_loss
from dockyard.torch.testing import random_batch


def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped_mm", "loop"])
def test_logits_equal_transformers(qwen3_moe_path, grouped):
    hf, ours = _hf(qwen3_moe_path), _hf(qwen3_moe_path)
    assert install_moe(ours, MoEConfig(grouped_gemm=grouped)) == 2
    batch = random_batch(4, 24, seed=3)
    ids = torch.as_tensor(batch.input_ids)
    mask = torch.as_tensor(batch.attention_mask).long()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=2e-5)
    block = moe_blocks(ours)[0]
    x = torch.randn(64, 64)
    r = route(torch.nn.functional.linear(x, block.gate.weight), 2, block.expert_bias, True)
    assert (r.counts > 0).sum() >= 6  # the router really spreads tokens (not a tie)


def _block(grouped: bool, seed: int = 0, **cfg) -> MoEBlock:
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    torch.manual_seed(seed)
    hf = Qwen3MoeSparseMoeBlock(
        Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8,
                       num_experts_per_tok=2, norm_topk_prob=True)
    )  # fmt: skip
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.2)
    block = MoEBlock(hf, MoEConfig(grouped_gemm=grouped, **cfg))
    return block.train()


def test_grouped_gemm_equals_loop_forward_and_gradients():
    grads = {}
    outs = {}
    x0 = torch.randn(3, 17, 64)
    for grouped in (True, False):
        block = _block(grouped)
        x = x0.clone().requires_grad_()
        y = block(x)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs[grouped] = y.detach()
        grads[grouped] = [x.grad] + [p.grad for p in block.parameters()]
    torch.testing.assert_close(outs[True], outs[False], rtol=0, atol=1e-5)
    assert len(grads[True]) == 4  # input, router, gate_up, down
    for g, ref in zip(grads[True], grads[False], strict=True):
        assert ref.abs().max() > 0
        torch.testing.assert_close(g, ref, rtol=0, atol=1e-5)


def test_grouped_gemm_bfloat16_close_to_loop():
    x = torch.randn(40, 64, dtype=torch.bfloat16)
    counts = torch.tensor([5, 0, 9, 3, 7, 0, 10, 6])
    gu = torch.randn(8, 64, 64, dtype=torch.bfloat16) * 0.1
    down = torch.randn(8, 64, 32, dtype=torch.bfloat16) * 0.1
    act = torch.nn.functional.silu
    a, b = grouped_ffn(x, counts, gu, down, act), loop_ffn(x, counts, gu, down, act)
    torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_grouped_gemm_refuses_unaligned_sizes():
    with pytest.raises(ValueError, match="grouped_gemm=false"):
        check_grouped_shapes(64, 36)


def test_capacity_keeps_each_experts_most_probable_assignments():
    torch.manual_seed(1)
    logits = torch.randn(50, 8) * 2
    r = route(logits, 2, None, True, capacity_factor=0.75)
    capacity = math.ceil(0.75 * 100 / 8)
    probs = logits.double().softmax(-1)
    want = torch.zeros(50, 2, dtype=torch.bool)
    for e in range(8):  # float64 reference: keep the top `capacity` assignments of e
        rows = [(float(probs[t, e]), t, j) for t in range(50) for j in range(2)
                if r.experts[t, j] == e]  # fmt: skip
        for _, t, j in sorted(rows, reverse=True)[:capacity]:
            want[t, j] = True
    assert torch.equal(r.keep, want)
    assert int(r.dropped) == int((~want).sum()) > 0
    assert torch.all(r.gates[~r.keep] == 0)


def test_capacity_counts_real_tokens_only():
    """Padding takes no slot: the real tokens keep what they keep alone, padding is dropped
    and not counted as dropped."""
    torch.manual_seed(3)
    logits = torch.randn(50, 8) * 2
    real = torch.arange(50) < 30
    alone = route(logits[:30], 2, None, True, capacity_factor=0.75)
    padded = route(logits, 2, None, True, capacity_factor=0.75, real=real)
    assert torch.equal(padded.keep[:30], alone.keep)
    assert not padded.keep[30:].any()
    assert int(padded.dropped) == int(alone.dropped) > 0


def test_switch_aux_loss_formula_and_gradient():
    torch.manual_seed(2)
    w = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(30, 16, dtype=torch.float64)
    r = route(x @ w.T, 2, None, True)
    loss = switch_aux_loss(r.probs, r.counts)
    p = torch.softmax(x @ w.T, -1).detach()
    f = [sum(int(e in r.experts[t].tolist()) for t in range(30)) / 30 for e in range(8)]
    want = 8 * sum(f[e] * float(p[:, e].mean()) for e in range(8))
    assert float(loss.detach()) == pytest.approx(want, rel=1e-6)  # scores are float32
    loss.backward()
    assert w.grad.abs().max() > 0  # it trains the router


def test_aux_loss_free_bias_balances_a_skewed_router():
    torch.manual_seed(3)
    x = torch.randn(512, 16)
    x[:, 0] = 1.0 + 0.1 * x[:, 0]  # a feature every token shares...
    w = torch.randn(8, 16) * 0.5
    w[0, 0], w[1, 0] = 2.0, 1.0  # ...that experts 0 and 1 favour
    bias = torch.zeros(8)

    def imbalance(r):
        return float(r.counts.max() / r.counts.float().mean())

    seen = []
    for _ in range(200):  # route, then DeepSeek-V3's update with the loads
        r = route(x @ w.T, 2, bias, True)
        seen.append(imbalance(r))
        bias += bias_update(r.counts, 5e-3)
    assert seen[0] > 2.0
    assert np.mean(seen[-50:]) < 1.3  # max/mean load; it oscillates by ±γ near balance
    # the bias steers the choice only: gates are the unbiased scores, renormalised
    p = torch.softmax(x @ w.T, -1).gather(1, r.experts)
    torch.testing.assert_close(r.gates, p / p.sum(-1, keepdim=True))


def test_worker_reports_router_metrics_and_moves_the_bias(moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    worker = TorchPolicyWorker(moe_config)
    batch = random_batch(8, 24, seed=4)
    m = worker.train_step(batch, PolicyLoss())
    share = [m[f"moe/expert_load/{i}"] for i in range(8)]
    assert sum(share) == pytest.approx(1.0)
    assert m["moe/load_imbalance"] == pytest.approx(max(share) * 8, rel=0.2)
    assert m["moe/dropped_tokens"] == 0
    # each layer's bias moved by ±γ for every expert whose load differs from the mean
    assert 0 < m["moe/expert_bias_absmean"] <= 1e-3 * (1 + 1e-6)
    assert "moe/aux_loss" not in m
    # the loads count real tokens only: Σ loads = k · Σ lengths per layer
    lengths = batch.attention_mask.sum()
    load = sum(b.load.sum() for b in moe_blocks(worker.model))
    assert int(load) == 0  # taken at the end of the step
    worker.model.train()
    with torch.enable_grad():
        worker._loss_pass(batch, PolicyLoss(), train=False)
    counts = [int(b.take_stats()[0].sum()) for b in moe_blocks(worker.model)]
    assert counts == [2 * int(lengths)] * 2


def test_worker_aux_loss_option_trains_the_router(moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    batch = random_batch(8, 24, seed=5)
    routers = {}
    for kind in ("none", "aux_loss"):
        moe = {"router_load_balancing_type": kind, "aux_loss_coeff": 1.0}
        worker = TorchPolicyWorker({**moe_config, "moe": moe})
        m = worker.train_step(batch, MaskedNLLLoss())
        routers[kind] = worker.model.model.layers[0].mlp.gate.weight.detach().clone()
        if kind == "aux_loss":
            # E·Σ f_i P_i is k = 2 for a perfectly balanced router, more when skewed
            assert 2.0 <= m["moe/aux_loss"] < 4.0
    assert (routers["none"] - routers["aux_loss"]).abs().max() > 1e-6


def test_worker_capacity_drops_and_activation_checkpointing_counts_once(moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    batch = random_batch(8, 24, seed=6)
    metrics = {}
    for ckpt in (False, True):
        cfg = {**moe_config, "activation_checkpointing": ckpt,
               "moe": {"expert_capacity_factor": 0.5}}  # fmt: skip
        metrics[ckpt] = TorchPolicyWorker(cfg).train_step(batch, PolicyLoss())
    assert metrics[False]["moe/dropped_frac"] > 0.3  # ≥ half of all, padding included
    assert metrics[True]["moe/dropped_tokens"] == metrics[False]["moe/dropped_tokens"]
    assert metrics[True]["grad_norm"] == pytest.approx(metrics[False]["grad_norm"], rel=1e-5)


def test_export_writes_per_expert_names_transformers_loads(moe_config, tmp_path):
    from transformers import AutoModelForCausalLM

    from dockyard.torch.worker import TorchPolicyWorker

    worker = TorchPolicyWorker(moe_config)
    batch = random_batch(4, 20, seed=7)
    worker.train_step(batch, MaskedNLLLoss())
    names = {k for b in worker.export_weights(1 << 30) for k in b}
    assert "model.layers.1.mlp.experts.7.up_proj.weight" in names
    assert not any("gate_up_proj" in n or "expert_bias" in n for n in names)
    hf = AutoModelForCausalLM.from_pretrained(worker.export_hf(str(tmp_path / "hf"))).eval()
    for block in moe_blocks(worker.model):  # the bias moved; HF's model has none
        block.use_bias = False
    ours = worker.get_logprobs(batch)
    ids = torch.as_tensor(batch.input_ids)
    with torch.no_grad():
        logits = hf(ids, attention_mask=torch.as_tensor(batch.attention_mask).long()).logits
    lp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None])[..., 0]
    want = np.pad(lp.numpy(), ((0, 0), (1, 0))) * batch.attention_mask
    np.testing.assert_allclose(ours, want, atol=2e-5)
