"""Checkpoints with torch.distributed.checkpoint (DCP), and export to a plain HF folder.

Layout of a checkpoint folder::

    dcp/                 model + optimizer, sharded by DCP (global shapes in its metadata, so a
                         checkpoint saved by N ranks loads on M ranks, or on one process)
    trainer_state.pt     scheduler state, step, extra_state (rank 0)
    rng_rank{r}.pt       python / numpy / torch (/ cuda) RNG state of rank r
    hf/                  what an export needs besides the weights (rank 0): the model's
                         config.json and generation_config.json, the tokenizer files (of
                         ``tokenizer_name`` when set, with the run's chat template), and for
                         LoRA peft's adapter_config.json (r, α, target modules)

The model in ``dcp/`` is the trained module's state: with LoRA that is the frozen base weights
plus the unmerged ``lora_A`` / ``lora_B`` adapters, so :func:`export_hf` rebuilds the peft model
and merges them (W = W₀ + (α/r)·B·A) before writing.

An HF export folder holds ``config.json``, ``generation_config.json`` (when the source has one),
the tokenizer files, and ``model.safetensors`` or ``model-XXXXX.safetensors`` shards with
``model.safetensors.index.json`` — loadable by ``transformers`` and vLLM. The worker writes one from its live weights (``export_hf`` of the
worker); :func:`export_hf` here writes one from a checkpoint, in one process, whatever the number
of ranks that saved it.

The tokenizer is the one training used: ``tokenizer_name``'s files (else the model folder's), its
chat template replaced as ``policy.tokenizer.chat_template`` says (:func:`set_chat_template`),
so a server of the export formats prompts as the rollouts did.
"""

from __future__ import annotations

import contextlib
import copy
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
from safetensors.numpy import save_file

from dockyard.core.config.policy import TOKENIZER_FILES as _TOKENIZER_FILES
from dockyard.core.config.policy import set_chat_template
from dockyard.torch.export import bucketed, iter_hf_tensors

_HF_META = "hf"


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
    *,
    tokenizer_source: str | Path | None = None,
    chat_template: str | None = None,
) -> None:
    """Save a resharding-safe checkpoint (collective: every rank calls it). ``hf/`` gets the
    tokenizer of ``tokenizer_source`` (default: the model's folder) with ``chat_template``
    applied (:func:`set_chat_template`)."""
    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict import get_state_dict

    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    path = Path(path)
    if _rank() == 0:
        path.mkdir(parents=True, exist_ok=True)
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    no_dist = not dist.is_initialized()
    with _single_process_ok():
        dcp_save(
            {"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / "dcp"), no_dist=no_dist
        )
    torch.save(rng_state(), path / f"rng_rank{_rank()}.pt")
    if _rank() == 0:
        trainer = {"scheduler": scheduler.state_dict(), "step": step, "extra_state": extra_state}
        torch.save(trainer, path / "trainer_state.pt")
        save_hf_meta(path / _HF_META, model, tokenizer_source, chat_template)
    _barrier()


def save_hf_meta(
    folder: str | Path,
    model: torch.nn.Module,
    tokenizer_source: str | Path | None = None,
    chat_template: str | None = None,
) -> Path:
    """Write ``model``'s config, generation config, tokenizer files (copied from
    ``tokenizer_source``, default the folder the model was loaded from, with ``chat_template``
    applied), a vision-language model's image processor and, for a peft model, its
    ``adapter_config.json`` to ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    m: Any = model
    is_peft = hasattr(m, "get_base_model")
    hf = m.get_base_model() if is_peft else m
    hf.config.save_pretrained(folder)
    source = Path(hf.config.name_or_path or ".")
    if (source / "generation_config.json").is_file():
        shutil.copy(source / "generation_config.json", folder / "generation_config.json")
    elif getattr(hf, "generation_config", None) is not None:
        hf.generation_config.save_pretrained(folder)
    if is_peft:
        m.peft_config["default"].save_pretrained(folder)
    copy_tokenizer(tokenizer_source or source, folder, chat_template)
    if getattr(hf.config, "vision_config", None) is not None:
        copy_processor(hf.config.name_or_path or source, folder)
    return folder


def copy_tokenizer(source: str | Path, dest: str | Path, chat_template: str | None) -> None:
    """The tokenizer files of the folder ``source`` into ``dest``, then ``chat_template``
    applied (:func:`set_chat_template`)."""
    for fname in _TOKENIZER_FILES:
        if (Path(source) / fname).is_file():
            shutil.copy(Path(source) / fname, Path(dest) / fname)
    set_chat_template(dest, chat_template)


def load_checkpoint(
    path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> tuple[int, dict[str, Any]]:
    """Restore what :func:`save_checkpoint` wrote; returns ``(step, extra_state)``."""
    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    path = Path(path)
    if not (path / "trainer_state.pt").exists():
        raise FileNotFoundError(f"{path}: no trainer_state.pt here — not a dockyard checkpoint")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with _single_process_ok():
        dcp_load(state, checkpoint_id=str(path / "dcp"), no_dist=not dist.is_initialized())
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
    chat_template: str | None = None,
) -> Path:
    """Write buckets as safetensors shards plus config, ``source``'s generation config and the
    tokenizer of ``tokenizer_source`` (default ``source``) with ``chat_template`` applied
    (rank 0 writes; every rank must drain ``buckets`` since gathering them is collective)."""
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
        config = copy.deepcopy(config)
        config.use_cache = True  # the trainer turns the KV cache off; generation wants it
        config.save_pretrained(path)
        if source is not None and (Path(source) / "generation_config.json").is_file():
            shutil.copy(Path(source) / "generation_config.json", path / "generation_config.json")
        tokenizer = tokenizer_source if tokenizer_source is not None else source
        if tokenizer is not None:
            copy_tokenizer(tokenizer, path, chat_template)
        if source is not None and getattr(config, "vision_config", None) is not None:
            copy_processor(source, path)
    _barrier()
    return path


_PROCESSOR_FILES = (
    "preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json",
)  # fmt: skip


def copy_processor(source: str | Path, dest: str | Path) -> None:
    """A vision-language model's image (and video) processor settings from ``source`` (a
    folder, or a Hub name: its processor saved) into ``dest``: without them neither
    transformers nor vLLM turns an image into the model's inputs."""
    local = [f for f in _PROCESSOR_FILES if (Path(source) / f).is_file()]
    for fname in local:
        shutil.copy(Path(source) / fname, Path(dest) / fname)
    if not local:
        # lazy: transformers takes seconds to import; only a vision-language export needs it
        from transformers import AutoImageProcessor

        AutoImageProcessor.from_pretrained(str(source)).save_pretrained(str(dest))


def export_hf(checkpoint: str | Path, out: str | Path, *, bucket_bytes: int = 1 << 30) -> Path:
    """Write the policy of ``checkpoint`` (a folder :func:`save_checkpoint` wrote) to ``out`` as
    a Hugging Face folder (float32 safetensors; LoRA merged into the base weights), in this one
    process. ``out`` is written in place: ``dockyard.train.export`` makes it atomic."""
    path = Path(checkpoint)
    meta = path / _HF_META
    if not (path / "trainer_state.pt").is_file() or not (path / "dcp").is_dir():
        raise FileNotFoundError(f"{path}: no trainer_state.pt and dcp/ here — not a dockyard.torch "
                                "checkpoint")  # fmt: skip
    if not (meta / "config.json").is_file():
        raise FileNotFoundError(
            f"{meta}/config.json not found: this checkpoint was saved before checkpoints carried "
            "their model config; load it into a worker (load_checkpoint) and call its export_hf"
        )
    model = _model_from_meta(meta)
    _load_model_weights(path / "dcp", model)
    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    buckets = bucketed(iter_hf_tensors(model, "merged"), bucket_bytes)
    return write_hf_folder(out, buckets, hf.config, source=meta)  # hf/ has the run's template


def _model_from_meta(meta: Path) -> Any:
    """A float32 model built from ``meta``'s config (random weights; peft-wrapped for LoRA)."""
    # lazy: transformers takes ~2 s to import; only exporting a checkpoint builds a model here
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(meta)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if (meta / "adapter_config.json").is_file():
        # lazy: peft takes ~0.5 s to import on top of transformers; only LoRA checkpoints need it
        from peft import PeftConfig, get_peft_model

        lora = PeftConfig.from_pretrained(str(meta))
        lora.base_model_name_or_path = None  # the base is the model built here, not that folder
        model = get_peft_model(model, lora)
    return model.eval()


def _load_model_weights(dcp_dir: Path, model: torch.nn.Module) -> None:
    """Load the model half of a DCP checkpoint (any saving world size) into ``model``."""
    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    # lazy: torch.distributed.checkpoint takes ~0.5 s to import; only checkpointing needs it
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    state = {"model": get_model_state_dict(model)}
    with _single_process_ok():
        dcp_load(state, checkpoint_id=str(dcp_dir), no_dist=True)
    set_model_state_dict(model, state["model"])
