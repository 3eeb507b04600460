"""The SFT driver on the real torch worker: loss on answer tokens only, and it goes down."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")


def test_collate_masks_answers_only() -> None:
    from dockyard.train.algorithms.sft import collate

    b = collate([([5, 6, 7, 8, 2], 3), ([5, 6, 9, 2], 2)])
    assert b.loss_mask.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]]
    assert b.attention_mask.sum(axis=1).tolist() == [5, 4]


def test_sft_learns_and_exports(tmp_path) -> None:
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.sft import sft

    model = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    tok = AutoTokenizer.from_pretrained(str(model))
    worker = TorchPolicyWorker(
        {
            "model_name": str(model),
            "precision": "float32",
            "train_micro_batch_size": 8,
            "reference_policy": False,
            "optimizer": {"lr": 3e-3},
        }
    )
    examples = [
        {
            "messages": [
                {"role": "user", "content": f"list of size {n}"},
                {"role": "assistant", "content": f"[0]*{n}"},
            ]
        }
        for n in range(2, 10)
    ]
    hist = sft(worker, tok, examples, steps=25, batch_size=8, output_dir=tmp_path / "out")
    losses = np.array([h["loss"] for h in hist])
    assert losses[-3:].mean() < 0.5 * losses[:3].mean()
    assert (tmp_path / "out" / "config.json").exists()
