"""The ``PolicyWorker`` contract, held by the torch and the JAX worker alike.

Every test here runs once per backend with the same assertions (what the GRPO driver and
``PolicyHost`` rely on): logprob alignment and padding, the frozen reference, top-k shapes,
token entropies, train-step metric keys, export by HF name in bounded buckets, checkpoint round trips that
restore the optimizer, HF export, and weights sent through a real transport by ``PolicyHost``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces import PolicyWorker
from dockyard.core.rl import PolicyLoss

testing = pytest.importorskip("dockyard.torch.testing", reason="dockyard-torch not installed")

pytestmark = pytest.mark.slow

FACTORIES = {
    "torch": "dockyard.torch.worker:TorchPolicyWorker",
    "jax": "dockyard.jax.worker:JaxPolicyWorker",
}
VOCAB = 320
# Keys the driver logs (``train/<key>``) and the progress bar reads.
METRIC_KEYS = {"loss", "grad_norm", "lr", "num_loss_tokens", "num_sequences", "tokens_per_s",
               "step_time_s"}  # fmt: skip
LOSS = PolicyLoss("clipped_pg", {"kl_beta": 0.05, "kl_type": "k3", "agg": "token-mean"})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return testing.build_tiny_model(tmp_path_factory.mktemp("contract") / "m", vocab_size=VOCAB)


def _config(model_dir: Path) -> dict[str, Any]:
    return {"model_name": str(model_dir), "precision": "float32", "train_micro_batch_size": 3,
            "logprob_batch_size": 4, "max_grad_norm": 1.0, "reference_policy": True,
            "optimizer": {"lr": 1e-3}}  # fmt: skip


def _build(backend: str, model_dir: Path) -> PolicyWorker:
    from dockyard.train.runtime.hosts import load_object

    return load_object(FACTORIES[backend])(_config(model_dir))


@pytest.fixture(params=sorted(FACTORIES))
def backend(request) -> str:
    return request.param


def _batch(worker: PolicyWorker, seed: int = 1):
    """A GRPO batch whose gen logprobs are the worker's own plus noise, with the reference."""
    batch = testing.random_batch(7, 24, vocab_size=VOCAB, seed=seed)
    lp = worker.get_logprobs(batch)
    noise = np.random.default_rng(seed).normal(0, 0.05, lp.shape).astype(np.float32)
    ref = worker.get_reference_logprobs(batch)
    return dataclasses.replace(batch, gen_logprobs=(lp + noise) * batch.loss_mask, ref_logprobs=ref)


def _weights(worker: PolicyWorker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}


def _hf_file(model_dir: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_logprobs_alignment_reference_and_topk(backend, model_dir) -> None:
    worker = _build(backend, model_dir)
    assert isinstance(worker, PolicyWorker)
    assert worker.step == 0
    batch = testing.random_batch(7, 24, vocab_size=VOCAB, seed=1)
    lp = worker.get_logprobs(batch)
    assert lp.dtype == np.float32
    assert lp.shape == batch.shape
    assert np.all(lp[:, 0] == 0)
    assert np.all(lp[~batch.attention_mask] == 0)
    inside = batch.attention_mask.copy()
    inside[:, 0] = False
    assert np.all(np.isfinite(lp))
    assert np.all(lp[inside] < 0)
    np.testing.assert_array_equal(worker.get_reference_logprobs(batch), lp)
    # a row's logprobs do not depend on the other rows of its batch
    fields = ("input_ids", "attention_mask", "loss_mask", "advantages", "gen_logprobs")
    two = dataclasses.replace(batch, **{f: getattr(batch, f)[:2] for f in fields})
    np.testing.assert_allclose(worker.get_logprobs(two), lp[:2], atol=2e-5)

    values, indices = worker.get_topk_logits(batch, 5)
    assert values.shape == indices.shape == (*batch.shape, 5)
    assert values.dtype == np.float32
    assert indices.dtype == np.int64
    assert np.all(values[~batch.attention_mask] == 0)
    assert np.all(np.diff(values[batch.attention_mask], axis=-1) <= 0)  # sorted, largest first
    assert indices.min() >= 0
    assert indices.max() < VOCAB


def test_token_entropy_is_the_policys_at_its_temperature(backend, model_dir) -> None:
    """Checked against transformers' own logits of each row alone: H = −Σ p log p of the
    distribution token t was drawn from (τ = 0.7), 0 at t = 0 and on padding."""
    import torch
    from transformers import AutoModelForCausalLM

    from dockyard.train.runtime.hosts import load_object

    tau = 0.7
    worker = load_object(FACTORIES[backend])({**_config(model_dir), "generation_temperature": tau})
    batch = testing.random_batch(7, 24, vocab_size=VOCAB, seed=3)
    h = worker.get_token_entropy(batch)
    assert h.dtype == np.float32
    assert h.shape == batch.shape
    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    want = np.zeros(batch.shape, np.float32)
    for b, n in enumerate(batch.attention_mask.sum(axis=1)):
        with torch.no_grad():
            z = hf(torch.as_tensor(batch.input_ids[b : b + 1, :n])).logits[0, :-1].double() / tau
        p = torch.softmax(z, -1)
        want[b, 1:n] = (-(p * torch.log(p)).sum(-1)).numpy()
    np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-4)
    inside = batch.attention_mask.copy()
    inside[:, 0] = False
    assert (h[inside] > 0).all()
    assert (h[inside] < np.log(VOCAB)).all()


def test_train_step_metrics_and_frozen_reference(backend, model_dir) -> None:
    worker = _build(backend, model_dir)
    batch = _batch(worker)
    before = worker.get_logprobs(batch)
    m = worker.train_step(batch, LOSS)
    assert worker.step == 1
    assert m.keys() >= METRIC_KEYS
    assert all(isinstance(v, float) and np.isfinite(v) for v in m.values()), m
    assert m["num_loss_tokens"] == batch.loss_mask.sum()
    assert m["num_sequences"] == (batch.loss_mask.sum(axis=1) > 0).sum()
    assert m["grad_norm"] > 0
    assert m["lr"] == pytest.approx(1e-3)
    assert np.abs(worker.get_logprobs(batch) - before).max() > 1e-4
    np.testing.assert_array_equal(worker.get_reference_logprobs(batch), before)


def test_export_weights_by_hf_name_in_bounded_buckets(backend, model_dir) -> None:
    worker = _build(backend, model_dir)
    want = _hf_file(model_dir)
    bucket_bytes = 64 << 10
    seen: dict[str, np.ndarray] = {}
    for bucket in worker.export_weights(bucket_bytes):
        assert bucket
        assert all(isinstance(a, np.ndarray) for a in bucket.values())
        assert len(bucket) == 1 or sum(a.nbytes for a in bucket.values()) <= bucket_bytes
        assert not seen.keys() & bucket.keys()
        seen.update(bucket)
    assert seen.keys() == want.keys()
    for name, array in want.items():
        np.testing.assert_array_equal(seen[name], array, err_msg=name)


def test_checkpoint_round_trip_restores_weights_optimizer_and_step(
    backend, model_dir, tmp_path
) -> None:
    worker = _build(backend, model_dir)
    batch = _batch(worker)
    worker.train_step(batch, LOSS)
    worker.save_checkpoint(str(tmp_path / "ckpt"), {"step": 1, "note": "x"})
    saved = _weights(worker)
    m2 = worker.train_step(batch, LOSS)
    after2 = _weights(worker)

    fresh = _build(backend, model_dir)
    assert fresh.load_checkpoint(str(tmp_path / "ckpt")) == {"step": 1, "note": "x"}
    assert fresh.step == 1
    for name, array in _weights(fresh).items():
        np.testing.assert_array_equal(array, saved[name], err_msg=name)
    # the second step from the restored state equals the uninterrupted one: moments restored
    r2 = fresh.train_step(batch, LOSS)
    assert r2["loss"] == pytest.approx(m2["loss"], rel=1e-6)
    for name, array in _weights(fresh).items():
        np.testing.assert_allclose(array, after2[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_export_hf_loads_in_transformers(backend, model_dir, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    worker = _build(backend, model_dir)
    batch = _batch(worker)
    worker.train_step(batch, LOSS)
    out = worker.export_hf(str(tmp_path / "hf"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.from_numpy(batch.input_ids[:1, :10])).logits
    want = torch.log_softmax(logits[0, :-1], -1).gather(
        -1, torch.from_numpy(batch.input_ids[0, 1:10, None])
    )[:, 0]
    np.testing.assert_allclose(worker.get_logprobs(batch)[0, 1:10], want.numpy(), atol=5e-5)


def test_policy_host_sends_the_export_through_shm(backend, model_dir) -> None:
    """``PolicyHost.send_weights`` (what the driver calls in the trainer's Ray actor) feeds the
    worker's export to the shm sender; the receiving side gets every tensor by HF name."""
    from dockyard.serve.transports import open_receiver
    from dockyard.train.runtime.hosts import PolicyHost

    host = PolicyHost(FACTORIES[backend], _config(model_dir))
    sock = os.path.join("/tmp", f"dockyard-contract-{uuid.uuid4().hex[:8]}.sock")
    rx = open_receiver({"type": "shm", "socket_path": sock, "timeout_s": 60})
    rx.open()  # listening before the sender connects
    got: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            for bucket in rx.receive():
                assert bucket.version == 7
                got.update({k: np.array(a, copy=True) for k, a in bucket.tensors.items()})
        except BaseException as e:  # surfaced below
            errors.append(e)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        sent = host.send_weights(
            "shm", {"socket_path": sock, "timeout_s": 60, "bucket_bytes": 64 << 10}, 7, 64 << 10
        )
        thread.join(60)
    finally:
        host._sender.close()
        rx.close()
    assert not errors, errors
    want = _weights(host.worker)
    assert sent == sum(a.nbytes for a in want.values())
    assert got.keys() == want.keys()
    for name, array in want.items():
        np.testing.assert_array_equal(got[name], array, err_msg=name)


def test_backends_agree_on_topk_and_metric_keys(model_dir) -> None:
    """Same model and batch: the same top-k (values, indices) and the same metric names."""
    batch = testing.random_batch(7, 24, vocab_size=VOCAB, seed=1)
    keys, topk = {}, {}
    for name in FACTORIES:
        worker = _build(name, model_dir)
        topk[name] = worker.get_topk_logits(batch, 4)
        keys[name] = set(worker.train_step(_batch(worker), LOSS))
    assert keys["torch"] == keys["jax"], keys["torch"] ^ keys["jax"]
    np.testing.assert_allclose(topk["jax"][0], topk["torch"][0], rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(topk["jax"][1], topk["torch"][1])
