"""JaxPolicyWorker on one device: logprobs, reference, train step, schedule, checkpoints, export."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dockyard.core.config.optim import SchedulerConfig, lr_factor
from dockyard.core.interfaces import PolicyWorker
from dockyard.core.rl import MaskedNLLLoss, PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.optim import clip_by_global_norm

torch = pytest.importorskip("torch")


def _worker(path, **over) -> JaxPolicyWorker:
    cfg = {"model_name": str(path), "train_micro_batch_size": 2, "logprob_batch_size": 6,
           "optimizer": {"lr": 1e-3}, **over}  # fmt: skip
    return JaxPolicyWorker(cfg)


def _with_gen(worker, batch):
    lp = worker.get_logprobs(batch)
    noise = np.random.default_rng(3).normal(0, 0.05, lp.shape).astype(np.float32)
    return dataclasses.replace(batch, gen_logprobs=(lp + noise) * batch.loss_mask)


def test_logprobs_match_transformers(tiny_qwen2, make_grpo_batch) -> None:
    transformers = pytest.importorskip("transformers")
    worker = _worker(tiny_qwen2, generation_temperature=0.7)
    assert isinstance(worker, PolicyWorker)
    batch = make_grpo_batch(96)
    got = worker.get_logprobs(batch)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2).float().eval()
    with torch.no_grad():
        logits = hf(
            input_ids=torch.from_numpy(batch.input_ids),
            attention_mask=torch.from_numpy(batch.attention_mask).long(),
        ).logits
    z = torch.log_softmax(logits[:, :-1] / 0.7, dim=-1)
    want = torch.gather(z, -1, torch.from_numpy(batch.input_ids[:, 1:, None])).squeeze(-1)
    want = np.pad(want.numpy(), ((0, 0), (1, 0))) * batch.attention_mask
    assert got.dtype == np.float32
    assert got.shape == batch.shape
    assert np.all(got[:, 0] == 0)
    assert np.all(got[~batch.attention_mask] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def test_train_step_moves_policy_not_reference(tiny_qwen2, make_grpo_batch) -> None:
    worker = _worker(tiny_qwen2)
    batch = _with_gen(worker, make_grpo_batch(96))
    before = worker.get_logprobs(batch)
    np.testing.assert_array_equal(worker.get_reference_logprobs(batch), before)
    m = worker.train_step(batch, PolicyLoss("clipped_pg", {"agg": "token-mean"}))
    assert worker.step == 1
    assert np.isfinite(m["loss"])
    assert m["grad_norm"] > 0
    assert m["lr"] == pytest.approx(1e-3)
    assert m["num_loss_tokens"] == batch.loss_mask.sum()
    after = worker.get_logprobs(batch)
    assert np.abs(after - before).max() > 1e-4
    np.testing.assert_array_equal(worker.get_reference_logprobs(batch), before)


def test_nll_steps_reduce_loss(tiny_qwen2, make_grpo_batch) -> None:
    worker = _worker(tiny_qwen2, optimizer={"lr": 3e-3})
    batch = make_grpo_batch(96)
    losses = [worker.train_step(batch, MaskedNLLLoss())["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 0.05


def test_update_independent_of_micro_batch_size(tiny_qwen2, make_grpo_batch) -> None:
    batch = make_grpo_batch(96)
    loss = PolicyLoss("clipped_pg", {"agg": "token-mean"})
    results = []
    for micro in (1, 6):
        w = _worker(tiny_qwen2, train_micro_batch_size=micro)
        b = _with_gen(w, batch)
        m = w.train_step(b, loss)
        results.append((m, dict(w.iter_weights())))
    (m1, w1), (m2, w2) = results
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-5, abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-4)
    for name in w1:  # Adam's m/√v amplifies fp32 noise on near-zero grads: 1% of a step
        np.testing.assert_allclose(w1[name], w2[name], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear"])
def test_lr_schedule_formula(kind: str) -> None:
    cfg = SchedulerConfig(name=kind, warmup_steps=3, total_steps=13, min_lr_ratio=0.1)
    got = [float(lr_factor(jnp.asarray(t), cfg, jnp)) for t in range(16)]  # as optax calls it
    assert got[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])
    p = np.clip((np.arange(16) - 3) / 10, 0, 1)
    after = {"constant": np.ones(16), "cosine": 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * p)),
             "linear": 0.1 + 0.9 * (1 - p)}[kind]  # fmt: skip
    assert got[3:] == pytest.approx(list(after[3:]), rel=1e-6)


def test_clipping_matches_torch() -> None:
    rng = np.random.default_rng(0)
    grads = {
        "a": rng.normal(size=(5, 3)).astype(np.float32),
        "b": rng.normal(size=7).astype(np.float32),
    }
    for max_norm in (0.5, 100.0):
        tg = [torch.tensor(grads["a"]), torch.tensor(grads["b"])]
        ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in tg]
        for p, g in zip(ps, tg, strict=True):
            p.grad = g.clone()
        tnorm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        clipped, norm = clip_by_global_norm(jax.tree.map(jnp.asarray, grads), max_norm)
        assert float(norm) == pytest.approx(float(tnorm), rel=1e-6)
        np.testing.assert_allclose(np.asarray(clipped["a"]), ps[0].grad.numpy(), rtol=1e-6)


def test_checkpoint_resume_is_exact(tiny_qwen2, make_grpo_batch, tmp_path) -> None:
    batch = make_grpo_batch(96)
    loss = MaskedNLLLoss()
    sched = {"name": "cosine", "warmup_steps": 1, "total_steps": 4}
    a = _worker(tiny_qwen2, scheduler=sched)
    a.train_step(batch, loss)
    a.save_checkpoint(str(tmp_path / "ck"), extra_state={"data_cursor": 7, "v": np.int64(3)})
    ma = a.train_step(batch, loss)
    b = _worker(tiny_qwen2, scheduler=sched)
    assert b.load_checkpoint(str(tmp_path / "ck")) == {"data_cursor": 7, "v": 3}
    assert b.step == 1
    mb = b.train_step(batch, loss)
    assert (ma["loss"], ma["grad_norm"], ma["lr"]) == (mb["loss"], mb["grad_norm"], mb["lr"])
    for (na, xa), (nb, xb) in zip(a.iter_weights(), b.iter_weights(), strict=True):
        assert na == nb
        np.testing.assert_array_equal(xa, xb)


def test_export_weights_buckets(tiny_qwen2, make_grpo_batch) -> None:
    from safetensors.numpy import load_file

    w = _worker(tiny_qwen2)
    original = load_file(str(tiny_qwen2 / "model.safetensors"))
    buckets = list(w.export_weights(bucket_bytes=40_000))
    assert len(buckets) > 2
    for bucket in buckets:
        total = sum(a.nbytes for a in bucket.values())
        assert total <= 40_000 or len(bucket) == 1
    flat = {k: v for b in buckets for k, v in b.items()}
    assert set(flat) == set(original)
    for name, array in original.items():
        np.testing.assert_array_equal(flat[name], array)
    w.train_step(make_grpo_batch(96), MaskedNLLLoss())
    moved = {k: v for b in w.export_weights(1 << 30) for k, v in b.items()}
    assert not np.array_equal(moved["lm_head.weight"], original["lm_head.weight"])


def test_topk_logits_match_transformers(tiny_qwen2, make_grpo_batch) -> None:
    transformers = pytest.importorskip("transformers")
    w = _worker(tiny_qwen2)
    batch = make_grpo_batch(96, B=3)
    values, indices = w.get_topk_logits(batch, 4)
    assert values.shape == (3, 24, 4)
    assert indices.dtype == np.int64
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2).float().eval()
    with torch.no_grad():
        logits = hf(
            input_ids=torch.from_numpy(batch.input_ids),
            attention_mask=torch.from_numpy(batch.attention_mask).long(),
        ).logits
    tv, ti = torch.topk(logits[:, :-1], 4, dim=-1)
    keep = batch.attention_mask[:, 1:]
    np.testing.assert_allclose(values[:, 1:][keep], tv.numpy()[keep], rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(indices[:, 1:][keep], ti.numpy()[keep])
    assert np.all(values[:, 0] == 0)
    assert np.all(values[~batch.attention_mask] == 0)


def test_config_from_the_run_config() -> None:
    from dockyard.core.config.schema import MasterConfig

    master = MasterConfig.model_validate({
        "policy": {"model_name": "/m", "precision": "float32", "train_micro_batch_size": 2,
                   "train_global_batch_size": 8, "max_grad_norm": 0.5,
                   "optimizer": {"lr": 3e-6, "weight_decay": 0.0},
                   "scheduler": {"name": "cosine", "warmup_steps": 2, "min_lr_ratio": 0.1},
                   "dtensor_cfg": {"enabled": False},
                   "jax_cfg": {"enabled": True, "tensor_parallel_size": 2},
                   "generation": {"temperature": 0.8}},
        "grpo": {"max_num_steps": 50},
    })  # fmt: skip
    from dockyard.jax.config import JaxPolicyConfig
    from dockyard.train.algorithms.configs import worker_config

    cfg = JaxPolicyConfig(**worker_config(master))  # what the driver's split maps it to
    assert cfg.model_name == "/m"
    assert cfg.train_micro_batch_size == 2
    assert cfg.logprob_batch_size == 2
    assert cfg.generation_temperature == 0.8
    assert cfg.optimizer.lr == 3e-6
    assert (cfg.scheduler.name, cfg.scheduler.total_steps) == ("cosine", 50)
    assert cfg.mesh.tensor_parallel_size == 2
    with pytest.raises(ValueError, match="extra_key"):
        JaxPolicyConfig(model_name="/m", extra_key=1)


def test_rank_world_size_convention(tiny_qwen2) -> None:
    """The Ray fleet passes rank/world_size as to the torch worker; one process is supported."""
    w = JaxPolicyWorker({"model_name": str(tiny_qwen2)}, rank=0, world_size=1)
    assert w.step == 0
    with pytest.raises(ValueError, match="world_size=2"):
        JaxPolicyWorker({"model_name": str(tiny_qwen2)}, rank=1, world_size=2)
