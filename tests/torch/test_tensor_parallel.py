"""Tensor and context parallelism on gloo: tp=2 and cp=2 on two real processes equal one process.

The 2-rank job (tests/torch/_tp_job.py) runs a Qwen3 model (GQA: 4 query heads, 2 KV heads,
per-head q_norm/k_norm whose gradients are summed over the tp group) with
``tensor_parallel_size=2``; the tests replay it on one process and compare logprobs, losses,
grad norms and weights, and resume its checkpoint on one process.

The context-parallel job (the same script, ``context_parallel_size=2``) cuts every micro-batch's
rows in two position chunks (odd widths padded), with all-gather attention, FSDP2 over the two
ranks and activation checkpointing (its recomputation replays the chunk); the one-process
replay, unsplit, gives the same logprobs, losses, grad norms and weights after two Adam steps.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from dockyard.core.config import config_from_dict
from dockyard.core.rl import PolicyLoss
from dockyard.torch.context_parallel import check_context_parallel
from dockyard.torch.testing import build_tiny_model, random_batch

JOB = Path(__file__).with_name("_tp_job.py")
CONFIG = {
    "precision": "float32",
    "train_micro_batch_size": 2,
    "logprob_batch_size": 4,
    "reference_policy": False,
    "optimizer": {"lr": 1e-3, "weight_decay": 0.01},
    "scheduler": {"name": "cosine", "warmup_steps": 2, "total_steps": 10},
}
# 3% of one Adam step (lr 1e-3): the row-split projections sum their partial products in
# another order (an all-reduce), and Adam's m/√v amplifies that where a gradient is near ε.
ATOL = 3e-5


@pytest.fixture(scope="module")
def qwen3_gqa():
    from dockyard.torch.testing import build_tiny_model

    return str(build_tiny_model(family="qwen3", hidden_size=128, num_heads=4, num_kv_heads=2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory, qwen3_gqa):
    out = tmp_path_factory.mktemp("tp2")
    config = {**CONFIG, "tensor_parallel_size": 2, "checkpoint": True}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(JOB),
        str(out),
        qwen3_gqa,
        json.dumps(config),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, json.loads((out / "results.json").read_text())


def _weights(worker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(bucket_bytes=1 << 30) for k, v in b.items()}


def _assert_close(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], atol: float):
    assert set(got) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=atol, err_msg=name)


@pytest.mark.slow
def test_tp2_equals_one_process(tp_run, qwen3_gqa):
    from dockyard.torch.worker import TorchPolicyWorker

    out, res = tp_run
    assert (res["world_size"], res["dp_size"], res["tp_size"], res["fsdp"]) == (2, 1, 2, False)
    # each rank holds half of a column-split and of a row-split projection
    for shapes in res["local_shapes"]:
        assert shapes["model.layers.0.self_attn.q_proj.weight"] == [64, 128]  # 4 heads × 32 / 2
        assert shapes["model.layers.0.self_attn.o_proj.weight"] == [128, 64]
        assert shapes["model.layers.0.mlp.down_proj.weight"] == [128, 128]  # 256 / 2 inputs

    worker = TorchPolicyWorker({**CONFIG, "model_name": qwen3_gqa, "train_micro_batch_size": 3})
    loss = PolicyLoss(options={"eps_low": 0.2})
    b1, b2 = random_batch(8, 24, seed=1), random_batch(8, 24, seed=2)
    np.testing.assert_allclose(worker.get_logprobs(b1), np.load(out / "lp0.npy"), atol=1e-5)
    w0 = _weights(worker)
    m1 = worker.train_step(b1, loss)
    assert m1["loss"] == pytest.approx(res["m1"]["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(res["m1"]["grad_norm"], rel=1e-5)
    assert m1["num_loss_tokens"] == res["m1"]["num_loss_tokens"]  # counted once per tp group
    w1 = dict(np.load(out / "w1.npz"))  # full tensors gathered from the DTensor shards
    assert max(np.abs(w1[k] - w0[k]).max() for k in w0) > 1e-4  # the step moved the weights
    q_norm = "model.layers.0.self_attn.q_norm.weight"
    assert np.abs(w1[q_norm] - w0[q_norm]).max() > 1e-4  # its grad summed over both ranks' heads
    _assert_close(_weights(worker), w1, ATOL)
    m2 = worker.train_step(b2, loss)
    assert m2["loss"] == pytest.approx(res["m2"]["loss"], abs=1e-6)
    _assert_close(_weights(worker), dict(np.load(out / "w2.npz")), ATOL)


@pytest.mark.slow
def test_tp2_checkpoint_resumes_on_one_process(tp_run, qwen3_gqa):
    from dockyard.torch.worker import TorchPolicyWorker

    out, res = tp_run
    worker = TorchPolicyWorker({**CONFIG, "model_name": qwen3_gqa})
    assert worker.load_checkpoint(str(out / "ckpt")) == {"note": "tp step 1"}
    _assert_close(_weights(worker), dict(np.load(out / "w1.npz")), atol=0)
    m2 = worker.train_step(random_batch(8, 24, seed=2), PolicyLoss(options={"eps_low": 0.2}))
    assert m2["lr"] == pytest.approx(res["m2"]["lr"])
    _assert_close(_weights(worker), dict(np.load(out / "w2.npz")), ATOL)


def test_gqa_heads_must_divide_by_tp():
    from transformers import Qwen2Config

    from dockyard.torch.parallel import check_tp_divisibility

    cfg = Qwen2Config(
        hidden_size=128, num_attention_heads=4, num_key_value_heads=1, intermediate_size=256
    )
    check_tp_divisibility(cfg, 1)
    with pytest.raises(ValueError, match=r"num_key_value_heads=1") as err:
        check_tp_divisibility(cfg, 2)
    assert "num_attention_heads" not in str(err.value)
    with pytest.raises(ValueError, match=r"num_attention_heads=4, num_key_value_heads=1"):
        check_tp_divisibility(cfg, 8)


def test_tp_plan_from_the_model_config(qwen3_gqa):
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )
    from transformers import AutoModelForCausalLM

    from dockyard.torch.parallel import tp_plan

    plan = tp_plan(AutoModelForCausalLM.from_pretrained(qwen3_gqa))
    assert isinstance(plan["self_attn.q_proj"], ColwiseParallel)
    assert isinstance(plan["self_attn.k_proj"], ColwiseParallel)
    assert isinstance(plan["self_attn.o_proj"], RowwiseParallel)
    assert isinstance(plan["mlp.down_proj"], RowwiseParallel)
    assert isinstance(plan["self_attn.q_norm"], SequenceParallel)  # grads summed over tp
    attn = {f"self_attn.{m}" for m in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
    mlp = {f"mlp.{m}" for m in ("gate_proj", "up_proj", "down_proj")}
    assert set(plan) == attn | mlp  # embeddings / LM head stay replicated


def test_tp_without_enough_ranks_is_a_clear_error(qwen3_gqa):
    from dockyard.torch.worker import TorchPolicyWorker

    with pytest.raises(ValueError, match="tensor_parallel_size=2 does not divide world_size=1"):
        TorchPolicyWorker({**CONFIG, "model_name": qwen3_gqa, "tensor_parallel_size": 2})


def test_tp_with_lora_is_a_clear_error(qwen3_gqa):
    from dockyard.torch.config import TorchPolicyConfig
    from dockyard.torch.model import DistInfo, load_hf_model, shard_model
    from dockyard.torch.parallel import MeshInfo

    cfg = TorchPolicyConfig(**CONFIG, model_name=qwen3_gqa, lora={"enabled": True})
    model = load_hf_model(cfg, torch.device("cpu"))
    info = DistInfo(0, 2, torch.device("cpu"), MeshInfo(1, 2, 0, 0, None))
    with pytest.raises(ValueError, match=r"lora\.enabled is not supported"):
        shard_model(model, info, cfg, fsdp=False)


def test_clip_grad_norm_matches_torch():
    from dockyard.torch.parallel import clip_grad_norm_

    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    for p, q in zip(a, b, strict=True):
        g = torch.randn_like(p)
        p.grad, q.grad = g.clone(), g.clone()
    expected = float(torch.nn.utils.clip_grad_norm_(a, 0.5))
    assert clip_grad_norm_(b, 0.5) == pytest.approx(expected, rel=1e-6)
    for p, q in zip(a, b, strict=True):
        torch.testing.assert_close(q.grad, p.grad)
    assert clip_grad_norm_(b, float("inf")) == pytest.approx(0.5, rel=1e-5)  # no-op norm


@pytest.fixture(scope="module", params=[2, 4], ids=["cp2", "dp2xcp2"])
def cp_run(request, tmp_path_factory, qwen3_gqa):
    """2 ranks: one context-parallel pair; 4: two data-parallel rows of a pair each."""
    ranks = request.param
    out = tmp_path_factory.mktemp(f"cp2-{ranks}")
    config = {**CONFIG, "context_parallel_size": 2, "activation_checkpointing": True}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
           f"--master_port={_free_port()}", str(JOB), str(out), qwen3_gqa, json.dumps(config)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_cp2_equals_one_process(cp_run, qwen3_gqa):
    from dockyard.torch.worker import TorchPolicyWorker

    out, res = cp_run
    world = res["world_size"]
    shape = (res["dp_size"], res["cp_size"], res["tp_size"], res["fsdp"])
    assert shape == (world // 2, 2, 1, True)  # FSDP2 shards over every data and cp rank
    for shapes in res["local_shapes"]:  # each rank holds 1/world of every parameter
        assert shapes["model.layers.0.self_attn.q_proj.weight"] == [128 // world, 128]
    worker = TorchPolicyWorker({**CONFIG, "model_name": qwen3_gqa})
    loss = PolicyLoss(options={"eps_low": 0.2})
    b1, b2 = random_batch(8, 24, seed=1), random_batch(8, 24, seed=2)
    lengths = b1.attention_mask.sum(axis=1)
    assert len(set(lengths % 2)) == 2  # odd and even widths: a chunk is padded
    np.testing.assert_allclose(worker.get_logprobs(b1), np.load(out / "lp0.npy"), atol=1e-5)
    # a per-position value other than the logprobs, gathered the same way
    np.testing.assert_allclose(worker.get_token_entropy(b1), np.load(out / "ent0.npy"), atol=1e-5)
    w0 = _weights(worker)
    m1 = worker.train_step(b1, loss)
    assert m1["loss"] == pytest.approx(res["m1"]["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(res["m1"]["grad_norm"], rel=1e-5)
    assert m1["num_loss_tokens"] == res["m1"]["num_loss_tokens"]  # counted once per cp group
    assert m1["num_sequences"] == res["m1"]["num_sequences"] == 8  # each row once
    w1 = dict(np.load(out / "w1.npz"))
    assert max(np.abs(w1[k] - w0[k]).max() for k in w0) > 1e-4  # the step moved the weights
    _assert_close(_weights(worker), w1, ATOL)
    m2 = worker.train_step(b2, loss)
    assert m2["loss"] == pytest.approx(res["m2"]["loss"], abs=1e-6)
    _assert_close(_weights(worker), dict(np.load(out / "w2.npz")), ATOL)


def test_what_context_parallelism_cannot_run_is_refused_with_the_fix() -> None:
    from transformers import AutoConfig

    dense = AutoConfig.from_pretrained(build_tiny_model(family="qwen3", hidden_size=64))
    check_context_parallel(dense, 2, tp=1, moe=False, packing=False)  # runs
    check_context_parallel(dense, 1, tp=2, moe=True, packing=True)  # cp 1: nothing to check
    gemma = AutoConfig.from_pretrained(build_tiny_model(family="gemma2", hidden_size=64))
    with pytest.raises(ValueError, match="cannot run here") as e:
        check_context_parallel(gemma, 2, tp=2, moe=True, packing=True)
    for reason in ("sliding-window", "soft-caps", "Mixture-of-Experts", "tensor_parallel_size=2",
                   "sequence_packing", "set context_parallel_size=1"):  # fmt: skip
        assert reason in str(e.value)
    base = {"policy": {"model_name": "m", "dtensor_cfg": {"context_parallel_size": 2}}}
    config_from_dict({**base, "cluster": {"trainer_ranks": 2}})  # accepted
    cases = [
        ({"cluster": {"trainer_ranks": 3}}, "must divide cluster.trainer_ranks=3"),
        ({"cluster": {"trainer_ranks": 4},
          "policy": {"model_name": "m", "shared_prefix": True, "sequence_packing": {"enabled": True},
                     "dtensor_cfg": {"context_parallel_size": 2, "tensor_parallel_size": 2}}},
         "tensor_parallel_size=2: context parallelism runs beside FSDP2 only"),
    ]  # fmt: skip
    for over, message in cases:
        with pytest.raises(ValueError, match=message) as e:
            config_from_dict({**base, **over})
    assert "shared_prefix=true" in str(e.value)
    assert "sequence_packing.enabled" in str(e.value)


def test_one_process_cannot_split_its_sequences(qwen3_gqa) -> None:
    from dockyard.torch.worker import TorchPolicyWorker

    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="context_parallel_size=2 needs 2 ranks or more"):
        TorchPolicyWorker({**CONFIG, "model_name": qwen3_gqa, "context_parallel_size": 2})
