"""Fixtures for dockyard.jax tests: tiny random Hugging Face models saved to a temp folder.

Models are built with transformers directly (random init, no hub). Every parameter — norms and
biases included — is re-drawn at random so that a wrong name-map row shows up in the logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

FAMILY_BASE: dict[str, dict[str, Any]] = {
    "qwen2": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64},
    "qwen3": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 24, "max_position_embeddings": 64},
    "llama": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64},
    # four layers, sliding and full; a window shorter than the test sequences (so it masks)
    "gemma2": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 5,
               "max_position_embeddings": 64},
    "gemma3_text": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 5,
                    "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                                    "sliding_attention"],
                    "max_position_embeddings": 64},
    # four experts, two per token; layer 1 sparse, layer 0 dense (mlp_only_layers)
    "qwen3_moe": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
                  "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 16, "mlp_only_layers": [0], "max_position_embeddings": 64},
    # Gated DeltaNet and gated full attention interleaved; two value heads per key head; RoPE on
    # a quarter of each head; experts + the shared expert in layers 1-3, layer 0 dense
    "qwen3_next": {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
                   "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "layer_types": ["linear_attention", "full_attention",
                                                   "linear_attention", "full_attention"],
                   "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 16, "linear_value_head_dim": 8,
                   "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                   "mlp_only_layers": [0], "max_position_embeddings": 64},
}  # fmt: skip


def build_hf_model(path: Path, family: str, seed: int = 0, **overrides: Any):
    """Save a random tiny ``family`` model to ``path``; returns the torch model (eval, fp32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    classes = {
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
        "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
        "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
        "qwen3_next": (transformers.Qwen3NextConfig, transformers.Qwen3NextForCausalLM),
    }
    config_cls, model_cls = classes[family]
    config = config_cls(**{**FAMILY_BASE[family], **overrides})
    if family.startswith("gemma"):  # sdpa drops Gemma 2's attention soft-cap; eager applies it
        config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(path)
    return model


def random_batch(vocab: int, lengths: list[int], T: int, seed: int = 0):
    """Right-padded ``(input_ids [B, T] int64, attention_mask [B, T] bool)``."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), T), np.int64)
    mask = np.zeros((len(lengths), T), bool)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(1, vocab, n)
        mask[b, :n] = True
    return ids, mask


@pytest.fixture
def make_batch():
    """:func:`random_batch` (test modules cannot import conftest under importlib mode)."""
    return random_batch


@pytest.fixture
def hf_model_factory(tmp_path: Path):
    def make(family: str, name: str = "model", **overrides: Any):
        path = tmp_path / name
        return path, build_hf_model(path, family, **overrides)

    return make


def grpo_batch(vocab: int, B: int = 6, T: int = 24, seed: int = 0, prompt_len: int = 5):
    """A right-padded GRPO :class:`Batch`: random lengths, loss on the response tokens,
    per-sequence advantages broadcast over tokens, generation logprobs filled in later."""
    from dockyard.core.experience import Batch

    rng = np.random.default_rng(seed)
    lengths = rng.integers(prompt_len + 2, T + 1, B)
    lengths[0] = T
    ids, mask = random_batch(vocab, list(lengths), T, seed)
    loss_mask = mask.copy()
    loss_mask[:, :prompt_len] = False
    adv = rng.normal(size=(B, 1)).astype(np.float32) * loss_mask
    zeros = np.zeros((B, T), np.float32)
    return Batch(ids, mask, loss_mask, adv.astype(np.float32), zeros)


@pytest.fixture
def make_grpo_batch():
    """:func:`grpo_batch`."""
    return grpo_batch


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> Path:
    """A random tiny Qwen2 HF folder shared by a test module."""
    path = tmp_path_factory.mktemp("qwen2") / "model"
    build_hf_model(path, "qwen2")
    return path


@pytest.fixture
def served_logprobs():
    """``(worker, source, batch) -> list per sequence``: vLLM's prompt logprobs of ``batch``'s
    sequences under the JAX ``worker``'s weights — exported as an HF folder (the tensors a push
    sends, by HF name) with ``source``'s tokenizer files beside them."""
    import shutil
    import tempfile

    testing = pytest.importorskip("dockyard.torch.testing")

    def serve(worker: Any, source: Path, batch: Any, dtype: str = "float32") -> list[list[float]]:
        folder = Path(worker.export_hf(tempfile.mkdtemp(prefix="dockyard-jax-export-")))
        for f in source.glob("*token*"):  # vLLM reads the tokenizer from the model folder
            shutil.copy(f, folder / f.name)
        prompts = [batch.input_ids[b, : int(batch.attention_mask[b].sum())].tolist()
                   for b in range(batch.input_ids.shape[0])]  # fmt: skip
        try:
            return testing.vllm_prompt_logprobs(folder, prompts, dtype)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return serve


@pytest.fixture
def two_grpo_steps():
    """``(worker, probe) -> (logprobs before, after)``: two clipped-PG steps of ``worker`` on
    random batches (``dockyard.torch.testing.random_batch``, vocabulary 1024), each with a finite
    loss and a gradient; the logprobs of ``probe`` moved by more than 1e-2."""
    from dockyard.core.rl import PolicyLoss

    testing = pytest.importorskip("dockyard.torch.testing")

    def steps(worker: Any, probe: Any) -> tuple[np.ndarray, np.ndarray]:
        before = worker.get_logprobs(probe)
        loss = PolicyLoss(options={"eps_low": 0.2})
        for seed in (1, 2):
            m = worker.train_step(testing.random_batch(8, 40, seed=seed), loss)
            assert np.isfinite(m["loss"])
            assert m["grad_norm"] > 0
        after = worker.get_logprobs(probe)
        assert np.abs(after - before).max() > 1e-2  # the two steps changed the policy
        return before, after

    return steps
