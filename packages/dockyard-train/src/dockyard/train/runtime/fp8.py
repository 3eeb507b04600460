"""FP8 rollout weights for a run (``policy.generation.vllm_cfg.precision: fp8``).

Two places change, both in the runtime's actors: each engine host starts its engine on a
block-FP8 copy of the start folder (:func:`fp8_start_folder`: vLLM reads the
``quantization_config`` and builds block-FP8 linear layers), and the trainer's rank 0 quantises
every push on its way to the sender (:func:`fp8_buckets`), so the engine receives the layout
its layers hold. The numerics (vLLM's block layout, the error bound, MoE experts) are
:mod:`dockyard.torch.fp8`'s; this module only wires them in.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

KEY = "policy.generation.vllm_cfg.precision=fp8"


def _fp8_module() -> Any:
    try:
        # lazy: dockyard-torch is optional (the torch extra); only an FP8 run needs it
        from dockyard.torch import fp8
    except ImportError as e:
        raise RuntimeError(
            f"{KEY} quantises with dockyard-torch, which is not installed here: "
            "pip install 'dockyard-train[torch]' (or 'dockyard-rl[torch]')"
        ) from e
    return fp8


def fp8_start_folder(model: str) -> str:
    """A block-FP8 copy of the HF folder ``model`` in a temp dir (removed when this process
    exits): the engine's starting weights when every push is FP8."""
    src = Path(model)
    if not (src / "config.json").is_file():
        raise ValueError(
            f"{KEY} starts each engine on an FP8 copy of a local model folder: {model!r} has "
            "no config.json (download the model and point policy.model_name at the folder)"
        )
    dst = Path(tempfile.mkdtemp(prefix="dockyard-fp8-"))
    atexit.register(shutil.rmtree, dst, True)
    return str(_fp8_module().save_fp8_checkpoint(src, dst))


def fp8_buckets(buckets: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A push's buckets (HF name -> numpy array, as ``export_weights`` yields them) with each
    quantisable weight as block FP8: numpy ``float8_e4m3fn`` and its ``<name>_scale_inv``."""
    # lazy: numpy (the hosts import this module before they set the thread variables)
    import numpy as np

    # lazy: as numpy (the conversion module imports it)
    from dockyard.serve.transports.torch_dtypes import from_numpy, to_numpy

    fp8 = _fp8_module()
    for bucket in buckets:
        named = ((name, from_numpy(np.ascontiguousarray(a))) for name, a in bucket.items())
        yield {name: to_numpy(t) for name, t in fp8.fp8_weights(named)}
