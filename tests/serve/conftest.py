"""Shared fixtures for tests/serve: a tiny model folder and its perturbed "next" weights; the
serve package's configs built from a run config's sections (``split``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dockyard.serve.config import EngineConfig, WeightSync


def _engines(master: Any, model_path: str | None = None, version: int = 0) -> EngineConfig:
    """The engines of ``master``'s sections, as the driver's split builds them."""
    return EngineConfig.from_sections(
        master.policy,
        seed=master.grpo.seed,
        gpus_per_node=master.cluster.gpus_per_node,
        model_path=model_path,
        version=version,
    )


def _sync(master: Any, run_id: str) -> WeightSync:
    """The weight sync of ``master``'s transport and cluster, as the stack builds it."""
    c = master.cluster
    return WeightSync(
        master.data_plane.weight_transport, run_id=run_id, gpus=bool(c.gpus_per_node),
        num_nodes=c.num_nodes,
    )  # fmt: skip


@pytest.fixture
def split() -> SimpleNamespace:
    """``split.engines(master, ...)`` and ``split.sync(master, run_id)``."""
    return SimpleNamespace(engines=_engines, sync=_sync)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 (hidden 64, 2 layers, head_dim 32) with its tokenizer."""
    pytest.importorskip("transformers")
    from dockyard.serve.testing import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "v0")


def torch_logprobs(
    model_dir: str | Path,
    prompt: list[int],
    tokens: list[int],
    temperature: float = 1.0,
    allowed: Any = None,
):
    """``[len(tokens)] float32``: log softmax(logits / T) of ``tokens`` after ``prompt`` under the
    weights in ``model_dir`` (the torch policy worker when installed, else plain transformers);
    over each token's allowed set where ``allowed`` (an engine's
    :class:`~dockyard.core.experience.AllowedTokens` of ``tokens``) says."""
    import numpy as np

    from dockyard.core.experience import AllowedTokens

    seq = np.asarray(prompt + tokens, dtype=np.int64)[None]
    whole = (
        None
        if allowed is None
        else AllowedTokens.concat([(len(prompt), None), (len(tokens), allowed)])
    )
    try:
        from dockyard.core.experience import Batch
        from dockyard.torch.worker import TorchPolicyWorker
    except ImportError:
        TorchPolicyWorker = None
    if TorchPolicyWorker is not None:
        w = TorchPolicyWorker(
            {
                "model_name": str(model_dir),
                "precision": "float32",
                "generation_temperature": temperature,
            }
        )
        T = seq.shape[1]
        z = np.zeros((1, T), np.float32)
        batch = Batch(
            input_ids=seq,
            attention_mask=np.ones((1, T), bool),
            loss_mask=np.ones((1, T), bool),
            advantages=z,
            gen_logprobs=z,
            allowed=None if whole is None else AllowedTokens(whole.table, whole.rows[None]),
        )
        return w.get_logprobs(batch)[0, len(prompt) :]
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = m(torch.from_numpy(seq)).logits[0].float() / temperature
    if whole is not None:  # position t - 1's logits choose token t
        bits = np.unpackbits(whole.table.view(np.uint8), axis=1, bitorder="little")
        for t in np.flatnonzero(whole.rows >= 0):
            keep = torch.as_tensor(bits[whole.rows[t], : logits.shape[-1]]).bool()
            logits[t - 1] = logits[t - 1].masked_fill(~keep, float("-inf"))
    lp = torch.log_softmax(logits, -1)
    idx = torch.arange(len(prompt) - 1, seq.shape[1] - 1)
    return lp[idx, torch.from_numpy(seq[0, len(prompt) :])].numpy()


@pytest.fixture(scope="session")
def torch_lp():
    """:func:`torch_logprobs` as a fixture (test modules cannot import conftest)."""
    return torch_logprobs
