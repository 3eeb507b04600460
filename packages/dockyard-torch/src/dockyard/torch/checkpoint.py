"""Checkpoints with torch.distributed.checkpoint (DCP), and export to a plain HF folder.

Layout of a checkpoint folder::

    dcp/                 model + optimizer, sharded by DCP (global shapes in its metadata, so a
                         checkpoint saved by N ranks loads on M ranks, or on one process)
    trainer_state.pt     scheduler state, step, extra_state (rank 0)
    rng_rank{r}.pt       python / numpy / torch (/ cuda) RNG state of rank r

An HF export folder holds ``config.json``, ``generation_config.json`` (when the source has one),
the tokenizer files, and ``model.safetensors`` or ``model-XXXXX.safetensors`` shards with
``model.safetensors.index.json`` — loadable by ``transformers`` and vLLM.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


@contextlib.contextmanager
def _single_process_ok():
    """DCP warns when used without a process group; on one process that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
        yield


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    step: int,
    extra_state: dict[str, Any] | None = None,
) -> None:
    """Save a resharding-safe checkpoint (collective: every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    if _rank() == 0:
        path.mkdir(parents=True, exist_ok=True)
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    no_dist = not dist.is_initialized()
    with _single_process_ok():
        dcp.save(
            {"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / "dcp"), no_dist=no_dist
        )
    torch.save(rng_state(), path / f"rng_rank{_rank()}.pt")
    if _rank() == 0:
        trainer = {"scheduler": scheduler.state_dict(), "step": step, "extra_state": extra_state}
        torch.save(trainer, path / "trainer_state.pt")
    _barrier()


def load_checkpoint(
    path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> tuple[int, dict[str, Any]]:
    """Restore what :func:`save_checkpoint` wrote; returns ``(step, extra_state)``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    if not (path / "trainer_state.pt").exists():
        raise FileNotFoundError(f"{path}: no trainer_state.pt here — not a dockyard checkpoint")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with _single_process_ok():
        dcp.load(state, checkpoint_id=str(path / "dcp"), no_dist=not dist.is_initialized())
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    trainer = torch.load(path / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(trainer["scheduler"])
    rng_file = path / f"rng_rank{_rank()}.pt"
    if not rng_file.exists():  # resharded to more ranks than were saved
        rng_file = path / "rng_rank0.pt"
    set_rng_state(torch.load(rng_file, weights_only=False))
    return int(trainer["step"]), trainer["extra_state"] or {}


def write_hf_folder(
    path: str | Path,
    buckets: Iterator[dict[str, np.ndarray]],
    config: Any,
    source: str | Path | None = None,
    tokenizer_source: str | Path | None = None,
) -> Path:
    """Write buckets as safetensors shards plus config and tokenizer (rank 0 writes; every
    rank must drain ``buckets`` since gathering them is collective)."""
    from safetensors.numpy import save_file

    path = Path(path)
    write = _rank() == 0
    if write:
        path.mkdir(parents=True, exist_ok=True)
    files: list[tuple[str, dict[str, np.ndarray]]] = []
    weight_map: dict[str, str] = {}
    total = 0
    for i, bucket in enumerate(buckets):
        if not write:
            continue
        name = f"model-{i + 1:05d}.safetensors"
        save_file(
            {k: np.ascontiguousarray(v) for k, v in bucket.items()},
            str(path / name),
            metadata={"format": "pt"},
        )
        files.append((name, {}))
        for k, v in bucket.items():
            weight_map[k] = name
            total += v.nbytes
    if write:
        if len(files) == 1:
            (path / files[0][0]).rename(path / "model.safetensors")
        else:
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
        config.save_pretrained(path)
        for src in (source, tokenizer_source):
            if src is None:
                continue
            for fname in (*_TOKENIZER_FILES, "generation_config.json"):
                if (Path(src) / fname).exists() and not (path / fname).exists():
                    shutil.copy(Path(src) / fname, path / fname)
    _barrier()
    return path
