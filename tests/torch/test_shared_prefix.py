"""Shared-prefix training (dockyard.torch.prefix): a batch laid out as prefix trees gives the
logprobs, losses and gradients of the same batch trained sequence by sequence.

Each check builds two workers from the same seed, ``shared_prefix`` on and off, and compares
``get_logprobs``, the loss pass's loss and every parameter's gradient, for GRPO groups (G
samples of a prompt), multi-turn trajectories that diverge at different turns (a tree), DPO
pairs, SFT on several completions and distillation from a teacher; over Qwen2, Qwen3 and Llama,
LoRA, and the three micro-batch planners. A test also checks that the shared layout is the one
used (it forwards fewer tokens), so equality cannot come from a silent fallback.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dockyard.core.experience import Batch
from dockyard.core.rl import MaskedNLLLoss, PolicyLoss
from dockyard.torch.prefix import build_tree, tree_mask, tree_tokens
from dockyard.torch.worker import TorchPolicyWorker

ATOL = 2e-5  # float32: the attention sums its keys in another order


def _batch(seqs: list[list[int]], prompt_lens: list[int], seed: int = 0) -> Batch:
    """Right-padded batch of ``seqs``; loss on the tokens after each ``prompt_len``."""
    rng = np.random.default_rng(seed)
    B, T = len(seqs), max(len(s) for s in seqs)
    ids = np.zeros((B, T), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    cols = np.arange(T)[None]
    lens = np.asarray([len(s) for s in seqs])[:, None]
    attention = cols < lens
    loss_mask = attention & (cols >= np.asarray(prompt_lens)[:, None])
    adv = (rng.normal(size=(B, 1)) * loss_mask).astype(np.float32)
    gen = (rng.normal(-2.0, 0.5, size=(B, T)) * loss_mask).astype(np.float32)
    return Batch(ids, attention, loss_mask, adv, gen)


def grpo_batch(n_prompts=3, group=4, prompt_len=24, seed=0) -> Batch:
    """``n_prompts`` prompts × ``group`` sampled completions (3–12 tokens), grouped."""
    rng = np.random.default_rng(seed)
    seqs, plens = [], []
    for _ in range(n_prompts):
        prompt = rng.integers(3, 1024, size=prompt_len).tolist()
        for _ in range(group):
            seqs.append(prompt + rng.integers(3, 1024, size=rng.integers(3, 13)).tolist())
            plens.append(prompt_len)
    return _batch(seqs, plens, seed)


def multiturn_batch(seed=0) -> Batch:
    """One task's 5 trajectories: a shared prompt, then turns that diverge at turn 1, 2 or 3
    (two are identical up to the last turn), plus an unrelated task's 2."""
    rng = np.random.default_rng(seed)
    tok = lambda n: rng.integers(3, 1024, size=n).tolist()  # noqa: E731
    prompt, t1, t2 = tok(16), tok(6), tok(5)
    seqs = [
        prompt + t1 + t2 + tok(4),
        prompt + t1 + t2 + tok(7),
        prompt + t1 + tok(9),
        prompt + tok(8),
        prompt + t1 + t2,
    ]
    other = tok(10)
    seqs += [other + tok(5), other + tok(3)]
    return _batch(seqs, [16, 16, 16, 16, 16, 10, 10], seed)


@pytest.fixture(scope="module")
def models():
    from dockyard.torch.testing import build_tiny_model

    return {f: str(build_tiny_model(family=f)) for f in ("qwen2", "qwen3", "llama")}


def _config(path: str, **extra) -> dict:
    return {
        "model_name": path,
        "precision": "float32",
        "train_micro_batch_size": 4,
        "logprob_batch_size": 4,
        "reference_policy": False,
        "optimizer": {"lr": 1e-3},
        **extra,
    }


def _grads(worker: TorchPolicyWorker) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in worker.model.named_parameters() if p.grad is not None}
    worker.optimizer.zero_grad(set_to_none=True)
    return out


def _lora_b_nonzero(worker: TorchPolicyWorker) -> None:
    """LoRA's B starts at 0 (so A's gradient is 0): give it the same random values in both."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in sorted(worker.model.named_parameters()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def _compare(config: dict, batch: Batch, loss_fn, keys: tuple[str, ...] | None = None):
    """Logprobs, the loss pass's metric sums (``keys``, default all) and the gradients of the
    shared layout against the unshared one."""
    shared = TorchPolicyWorker({**config, "shared_prefix": True})
    plain = TorchPolicyWorker({**config, "shared_prefix": False})
    if config.get("lora", {}).get("enabled"):
        _lora_b_nonzero(shared)
        _lora_b_nonzero(plain)
    np.testing.assert_allclose(
        shared.get_logprobs(batch), plain.get_logprobs(batch), rtol=0, atol=ATOL
    )
    assert shared._tree  # the shared layout was the one used
    assert not plain._tree
    out = []
    for w in (shared, plain):
        w.model.train()
        sums, _, _, n_all, n_fwd = w._loss_pass(batch, loss_fn, train=True)
        out.append((sums, _grads(w), n_all, n_fwd))
    (s_sums, s_grads, n_all, s_fwd), (p_sums, p_grads, _, p_fwd) = out
    assert s_fwd < min(p_fwd, n_all)  # the shared prefixes were forwarded once
    assert s_sums.keys() == p_sums.keys()
    for key in keys or s_sums:
        np.testing.assert_allclose(s_sums[key], p_sums[key], rtol=1e-5, atol=ATOL, err_msg=key)
    assert s_grads
    assert s_grads.keys() == p_grads.keys()
    for name, g in p_grads.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(s_grads[name], g, rtol=1e-4, atol=ATOL, msg=name)
    return shared, plain


def test_tree_layout_shares_prefixes_and_masks_to_ancestors():
    batch = multiturn_batch()
    lengths = batch.attention_mask.sum(1)
    rows = list(range(len(lengths)))
    tree = build_tree(batch.input_ids, lengths, rows)
    assert len(tree.input_ids) == tree_tokens(batch.input_ids, lengths, rows)
    # shared: prompt 16 + t1 6 + t2 5 once, then the branches; the other task's 10 once
    assert len(tree.input_ids) == 16 + 6 + 5 + 4 + 7 + 9 + 8 + 10 + 5 + 3
    for j, w in enumerate(tree.where):  # every sequence reads back its own tokens in order
        np.testing.assert_array_equal(tree.input_ids[w], batch.input_ids[j, : lengths[j]])
        np.testing.assert_array_equal(tree.position_ids[w], np.arange(lengths[j]))
    mask = tree_mask(tree, "cpu")[0, 0].numpy()
    for w in tree.where:
        last = w[-1]  # the last token sees exactly its own path
        np.testing.assert_array_equal(np.flatnonzero(mask[last]), np.sort(w))


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_grpo_groups_equal_unshared(models, family):
    _compare(_config(models[family]), grpo_batch(), PolicyLoss(options={"kl_beta": 0.0}))


@pytest.mark.parametrize(
    "batching",
    [
        {"sequence_packing": {"enabled": True, "train_mb_tokens": 96, "logprob_mb_tokens": 96}},
        {"dynamic_batching": {"enabled": True, "train_mb_tokens": 96, "logprob_mb_tokens": 96}},
    ],
    ids=["packing", "dynamic"],
)
def test_multiturn_tree_equal_unshared_with_packing_and_dynamic_batching(models, batching):
    config = _config(models["qwen2"], **batching)
    _compare(config, multiturn_batch(), PolicyLoss(options={"kl_beta": 0.0}))


def test_lora_and_sft_on_several_completions_equal_unshared(models):
    config = _config(models["qwen3"], lora={"enabled": True, "rank": 4})
    _compare(config, grpo_batch(n_prompts=2, group=3, seed=1), MaskedNLLLoss())


def test_dpo_pairs_equal_unshared(models):
    from dockyard.core.rl import PreferenceLoss, PreferencePairsLoss

    batch = grpo_batch(n_prompts=3, group=2, seed=2)  # rows 2i, 2i+1: one prompt's pair
    rng = np.random.default_rng(2)
    batch.ref_logprobs = rng.normal(-2.0, 0.5, size=batch.input_ids.shape) * batch.loss_mask
    batch.ref_logprobs = batch.ref_logprobs.astype(np.float32)
    # the pairs' mean metrics (margin, accuracy) are per micro-batch, and the shared layout
    # groups pairs differently: the loss (a sum over micro-batches) and gradients must agree
    loss_fn = PreferencePairsLoss(PreferenceLoss("dpo"))
    _compare(_config(models["llama"]), batch, loss_fn, keys=("loss",))


def test_distillation_equal_unshared(models):
    from dockyard.core.rl import DistillationLoss, OnPolicyDistillationLoss

    config = _config(models["qwen2"], teacher_model_name=models["qwen3"])
    loss_fn = OnPolicyDistillationLoss(DistillationLoss(topk=8))
    _compare(config, grpo_batch(n_prompts=2, group=3, seed=3), loss_fn)


def test_one_key_turns_it_off_and_jax_says_why_not():
    from dockyard.core.config import ConfigError, config_from_dict
    from dockyard.torch.config import TorchPolicyConfig
    from dockyard.train.algorithms.configs import torch_worker_config

    def mapped(cfg):  # what the driver's split maps the run config to
        return TorchPolicyConfig(**torch_worker_config(cfg))

    assert mapped(config_from_dict({})).shared_prefix  # on by default
    off = config_from_dict({"policy": {"shared_prefix": False}})
    assert not mapped(off).shared_prefix
    jax = {"dtensor_cfg": {"enabled": False}, "jax_cfg": {"enabled": True}}
    config_from_dict({"policy": jax})  # null: the JAX trainer simply trains unshared
    with pytest.raises(ConfigError) as e:
        config_from_dict({"policy": {**jax, "shared_prefix": True}})
    assert any("policy.shared_prefix is true, but the JAX trainer" in p for p in e.value.problems)


def test_tensor_parallel_over_gloo_equals_one_unshared_process(tmp_path):
    """tp = 2 on two real processes, prefix trees on, against one process without them."""
    import dataclasses
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from dockyard.torch.testing import build_tiny_model

    model = str(build_tiny_model(family="qwen3", hidden_size=128, num_heads=4, num_kv_heads=2))
    batch = grpo_batch(n_prompts=2, group=4, seed=4)
    fields = {k: v for k, v in dataclasses.asdict(batch).items() if isinstance(v, np.ndarray)}
    np.savez(tmp_path / "batch.npz", **fields)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = Path(__file__).with_name("_shared_prefix_job.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={port}", str(job), str(tmp_path), model]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    got = np.load(tmp_path / "result.npz")
    assert bool(got["tree"])
    plain = TorchPolicyWorker({**_config(model), "shared_prefix": False})
    np.testing.assert_allclose(got["logprobs"], plain.get_logprobs(batch), rtol=0, atol=ATOL)
    m = plain.train_step(batch, PolicyLoss(options={"kl_beta": 0.0}))
    assert float(got["loss"]) == pytest.approx(m["loss"], rel=1e-5, abs=ATOL)
    assert float(got["grad_norm"]) == pytest.approx(m["grad_norm"], rel=1e-4)
    for bucket in plain.export_weights(bucket_bytes=1 << 30):
        for name, value in bucket.items():  # 3e-5: Adam's step amplifies the reduction order
            np.testing.assert_allclose(got[f"w/{name}"], value, rtol=0, atol=3e-5, err_msg=name)


def test_sliding_window_models_stay_unshared(tmp_path):
    """Gemma 2's sliding-window layers: one ancestor mask would let a token see past its window,
    so the worker lays such a model's batches out unshared (its logprobs then equal the plain
    worker's); forced into a tree, the same batch comes out wrong — the gate is what holds."""
    from dockyard.torch.testing import build_tiny_model

    path = build_tiny_model(family="gemma2")  # a 16-token window, 2 layers
    config = _config(str(path), attn_implementation="eager")
    batch = grpo_batch(n_prompts=2, group=3, prompt_len=30, seed=4)  # prefixes past the window
    shared = TorchPolicyWorker({**config, "shared_prefix": True})
    plain = TorchPolicyWorker({**config, "shared_prefix": False})
    lp = plain.get_logprobs(batch)
    np.testing.assert_allclose(shared.get_logprobs(batch), lp, rtol=0, atol=ATOL)
    assert not shared._tree
    shared._tree_exact = True  # what the gate prevents
    forced = shared.get_logprobs(batch)
    assert shared._tree
    assert np.abs(forced - lp).max() > 1e-3
