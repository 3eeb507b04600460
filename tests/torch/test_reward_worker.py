"""The reward-model worker (dockyard.torch.reward): scores of shape [B] that do not depend on
padding, pairs kept whole in every batching mode, the exported folder loading as a Hugging
Face sequence classifier with the same scores (LoRA merged too), and the same step on two
FSDP2 ranks as on one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.experience import Batch
from dockyard.core.rl import BradleyTerryLoss, BradleyTerryPairsLoss

JOB = Path(__file__).with_name("_reward_dist_job.py")


@pytest.fixture(scope="module")
def tiny() -> Path:
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)


def worker(model: Path, **over: Any) -> Any:
    from dockyard.torch.reward import TorchRewardWorker

    cfg = {"model_name": str(model), "precision": "float32", "train_micro_batch_size": 64,
           "logprob_batch_size": 64, "optimizer": {"lr": 3e-3, "weight_decay": 0.0}}  # fmt: skip
    return TorchRewardWorker({**cfg, **over})


def rows(seqs: list[list[int]], pad: int = 0, width: int | None = None) -> Batch:
    """Right-padded rows of ``seqs`` (``pad`` in the padding)."""
    T = width or max(map(len, seqs))
    ids = np.full((len(seqs), T), pad, dtype=np.int64)
    att = np.zeros((len(seqs), T), dtype=bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], att[i, : len(s)] = s, True
    z = np.zeros((len(seqs), T), dtype=np.float32)
    return Batch(ids, att, att.copy(), advantages=z, gen_logprobs=z)


def pair_batch(n_pairs: int = 6, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    seqs = [
        rng.integers(3, 1000, size=int(rng.integers(4, 20))).tolist() for _ in range(2 * n_pairs)
    ]
    batch = rows(seqs)
    batch.extras["margin"] = np.repeat(rng.uniform(0, 1, n_pairs).astype(np.float32), 2)
    return batch


def test_scores_are_one_per_row_and_ignore_padding(tiny: Path) -> None:
    w = worker(tiny, logprob_batch_size=2)
    seqs = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15, 16]]
    scores = w.get_scores(rows(seqs))
    assert scores.shape == (3,)
    assert scores.dtype == np.float32
    alone = np.array([w.get_scores(rows([s]))[0] for s in seqs])
    np.testing.assert_allclose(scores, alone, rtol=1e-5, atol=1e-6)
    # more padding, and padding that holds other ids than the pad token: the same scores
    wide = rows(seqs, pad=77, width=20)
    np.testing.assert_allclose(w.get_scores(wide), alone, rtol=1e-5, atol=1e-6)
    assert len(set(np.round(alone, 6))) == 3  # the rows differ, so the head sees them


def test_pairs_stay_whole_in_every_batching_mode(tiny: Path) -> None:
    """The first step's loss and gradient are the same whatever the micro-batching (an odd
    size, dynamic batching): each pair is scored and lost together."""
    batch = pair_batch()
    fn = BradleyTerryPairsLoss(BradleyTerryLoss(use_margin=True))
    want = worker(tiny).train_step(batch, fn)
    assert np.isfinite(want["loss"])
    for mode in ({"train_micro_batch_size": 3},
                 {"dynamic_batching": {"enabled": True, "train_mb_tokens": 40}}):  # fmt: skip
        got = worker(tiny, **mode).train_step(batch, fn)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5), mode
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4), mode
        assert got["rm_accuracy"] == pytest.approx(want["rm_accuracy"]), mode


def test_the_step_loss_is_bradley_terry_of_the_scores(tiny: Path) -> None:
    w = worker(tiny, train_micro_batch_size=2)  # one pair per micro-batch
    batch = pair_batch()
    r = w.get_scores(batch).astype(np.float64)
    m = batch.extras["margin"][0::2].astype(np.float64)
    for use_margin in (False, True):
        want = np.mean(np.logaddexp(0.0, -(r[0::2] - r[1::2] - (m if use_margin else 0.0))))
        fresh = worker(tiny, train_micro_batch_size=2)
        got = fresh.train_step(batch, BradleyTerryPairsLoss(BradleyTerryLoss(use_margin)))
        assert got["loss"] == pytest.approx(want, rel=1e-5)
        assert got["rm_margin"] == pytest.approx(np.mean(r[0::2] - r[1::2]), rel=1e-4)


@pytest.mark.parametrize("lora", [False, True])
def test_the_export_loads_as_a_sequence_classifier(tiny: Path, tmp_path: Path, lora: bool) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    over = {"lora": {"enabled": True, "rank": 4, "alpha": 8.0,
                     "target_modules": ["q_proj", "v_proj"]}} if lora else {}  # fmt: skip
    w = worker(tiny, **over)
    batch = pair_batch()
    for _ in range(2):  # move the head and the adapters off their initial values
        w.train_step(batch, BradleyTerryPairsLoss())
    want = w.get_scores(batch)
    folder = Path(w.export_hf(str(tmp_path / "rm")))
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForSequenceClassification"]
    assert len(cfg["id2label"]) == 1  # num_labels
    assert cfg["pad_token_id"] == 0
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    AutoTokenizer.from_pretrained(folder)  # the tokenizer travels with it
    ids = torch.as_tensor(np.where(batch.attention_mask, batch.input_ids, 0))
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=torch.as_tensor(batch.attention_mask)).logits
    np.testing.assert_allclose(got[:, 0].numpy(), want, rtol=1e-4, atol=1e-5)


def test_packing_context_parallelism_and_token_logprobs_are_refused(tiny: Path) -> None:
    with pytest.raises(ValueError, match=r"sequence_packing\.enabled .* is not supported"):
        worker(tiny, sequence_packing={"enabled": True})
    with pytest.raises(ValueError, match=r"context_parallel_size=2 .* is not supported"):
        worker(tiny, context_parallel_size=2)
    with pytest.raises(NotImplementedError, match="use get_scores"):
        worker(tiny).get_logprobs(pair_batch())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_fsdp_ranks_score_and_step_as_one(tiny: Path, tmp_path: Path) -> None:
    """tests/torch/_reward_dist_job.py on 2 gloo ranks (FSDP2) against one process: the same
    scores, step loss and gradient norm, and the same scores after the step."""
    config = {"precision": "float32", "train_micro_batch_size": 2, "logprob_batch_size": 2,
              "optimizer": {"lr": 3e-3, "weight_decay": 0.0}}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", str(JOB), str(tmp_path), str(tiny),
           json.dumps(config)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    got = json.loads((tmp_path / "results.json").read_text())
    w = worker(tiny, **config)
    batch = pair_batch()
    np.testing.assert_allclose(got["before"], w.get_scores(batch), rtol=1e-5, atol=1e-6)
    m = w.train_step(batch, BradleyTerryPairsLoss())
    assert got["loss"] == pytest.approx(m["loss"], rel=1e-5)
    assert got["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-4)
    np.testing.assert_allclose(got["after"], w.get_scores(batch), rtol=1e-4, atol=1e-5)
