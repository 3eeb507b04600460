"""Fixtures for the ``gpu`` tests: the device, small model folders, a figures report, JAX on GPU.

Every module here is ``pytestmark = pytest.mark.gpu``: the suite-wide conftest skips them, with
the reason, where torch sees no CUDA GPU. ``bash scripts/gpu_checks.sh`` runs them on a lent GPU
host and gathers each test's outcome and figures into one report.

* :func:`gpu_report` prints a test's figures and, when ``DOCKYARD_GPU_REPORT_DIR`` is set, writes
  them to ``$DOCKYARD_GPU_REPORT_DIR/<name>.json`` (the script puts them in its report).
* :func:`jax_gpu` skips a test, with the reason, unless JAX (with flax and optax) sees a GPU.
* JAX does not preallocate 75 % of the GPU here (``XLA_PYTHON_CLIENT_PREALLOCATE=false``): the
  torch tests share the device in this process.
* Warnings raised in third-party code are shown, not errors, in these tests: a one-shot run on a
  lent GPU should not lose its figures to a library's CUDA-only warning. dockyard's own
  warnings still fail them, as everywhere (``filterwarnings = error``).

Private switch, for checking these tests' code on a machine without a GPU (not a product
mode): ``DOCKYARD_GPU_TESTS_ON_CPU=1`` lifts the skip, and the tests run their bodies on CPU
with smaller shapes, gloo instead of NCCL, JAX on its CPU backend; the NCCL and vLLM tests
still skip.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ON_CPU = os.environ.get("DOCKYARD_GPU_TESTS_ON_CPU") == "1"

# A small Qwen2 for the numerics tests: 4 layers, hidden 256, head_dim 64, GQA 4:2.
SMALL_MODEL = {
    "family": "qwen2",
    "hidden_size": 256,
    "num_layers": 4,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 688,
    "vocab_size": 1024,
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Show third-party warnings (module docstring); under ``DOCKYARD_GPU_TESTS_ON_CPU=1``,
    drop the suite-wide "gpu: no CUDA" skip."""
    here = Path(__file__).parent
    for item in items:
        if not item.path.is_relative_to(here):
            continue
        item.add_marker(pytest.mark.filterwarnings("always::Warning:(?!dockyard)"))
        if not ON_CPU:
            continue
        item.own_markers[:] = [
            m
            for m in item.own_markers
            if not (m.name == "skip" and str(m.kwargs.get("reason", "")).startswith("gpu:"))
        ]


@pytest.fixture(scope="session")
def device() -> str:
    """``"cuda"``, or ``"cpu"`` under the private CPU switch."""
    return "cpu" if ON_CPU else "cuda"


@pytest.fixture(scope="session")
def small_model_path() -> Path:
    """A random-initialised small Qwen2 folder with its tokenizer (cached on disk)."""
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(**SMALL_MODEL)


def _write_figures(name: str, figures: dict[str, Any]) -> None:
    text = json.dumps(figures, sort_keys=True, default=float)
    print(f"\nGPU-FIGURES {name} {text}", flush=True)
    folder = os.environ.get("DOCKYARD_GPU_REPORT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(text + "\n")


@pytest.fixture
def gpu_report():
    """``gpu_report(name, figures)``: print the figures; write them as JSON (module docstring)."""
    return _write_figures


@pytest.fixture(scope="session")
def jax_gpu():
    """The ``jax`` module, its default backend a GPU; skips (with the reason) otherwise."""
    jax = pytest.importorskip("jax")
    for module in ("flax", "optax"):
        pytest.importorskip(module, reason=f"the JAX worker needs {module}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = jax.default_backend()
    if backend != "gpu" and not ON_CPU:
        said = "; ".join(str(w.message) for w in caught)
        pytest.skip(
            f"JAX sees no GPU (default backend {backend!r}; install jax[cuda12]){': ' + said if said else ''}"
        )
    return jax


@pytest.fixture(scope="session")
def numerics_batch():
    """8 right-padded random sequences of at most 128 tokens (loss after 16), vocab 1024."""
    from dockyard.torch.testing import random_batch

    return random_batch(8, 128, vocab_size=SMALL_MODEL["vocab_size"], seed=11, prompt_len=16)


def _hf_fp32_logprobs(path: Path, batch: Any, device: str, dtype: str = "float32") -> Any:
    """``[B, T] float32``: plain transformers in float32 (or ``dtype``: transformers' own
    bf16 forward is the yardstick of bf16 rounding on a model) on ``device``, one unpadded
    sequence at a time (0 at t = 0 and on padding)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    assert torch.get_float32_matmul_precision() == "highest"  # no TF32 in the reference
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    out = np.zeros(batch.input_ids.shape, dtype=np.float32)
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            n = int(batch.attention_mask[b].sum())
            ids = torch.as_tensor(batch.input_ids[b, :n], device=device)[None]
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
            out[b, 1:n] = logp.gather(-1, ids[0, 1:, None])[:, 0].cpu().numpy()
    return out


@pytest.fixture(scope="session")
def hf_logprobs():
    """``hf_logprobs(path, batch, device, dtype="float32") -> [B, T] float32``: the HF fp32
    reference (or HF in ``dtype``)."""
    return _hf_fp32_logprobs


def _logprob_errors(got: Any, want: Any, batch: Any) -> tuple[float, float]:
    """(mean, max) |got − want| over the scored tokens (t ≥ 1 inside each sequence)."""
    import numpy as np

    mask = np.asarray(batch.attention_mask, dtype=bool).copy()
    mask[:, 0] = False
    err = np.abs(np.asarray(got) - np.asarray(want))[mask]
    return float(err.mean()), float(err.max())


@pytest.fixture(scope="session")
def logprob_errors():
    """``logprob_errors(got, want, batch) -> (mean, max)`` absolute differences."""
    return _logprob_errors
