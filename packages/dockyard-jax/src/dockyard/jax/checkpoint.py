"""Checkpoints with orbax: parameters and optimizer state as global arrays, resharding-safe.

Layout of a checkpoint folder::

    state/               orbax (OCDBT) tree {"params", "opt_state"}: global shapes, so a
                         checkpoint saved on one mesh restores on another (or on one device)
    trainer_state.json   step, the model folder, extra_state (JSON)
    hf/                  the model folder's config.json and generation_config.json, and the
                         tokenizer files (of ``tokenizer_name`` when set, with the run's chat
                         template: :func:`set_chat_template`): with ``state/``'s parameters, what
                         :func:`export_hf` writes as a Hugging Face folder (the model folder may
                         be gone by then)

The schedule's position is the optimizer's update count (inside ``opt_state``). The worker holds
no random state (its models have no dropout), so there is no RNG to save; ``seed`` only sets the
initialisation of models built from a config. A checkpoint is written beside its destination
and renamed into place, so an interrupted save never leaves a half-written folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from dockyard.core.config.policy import TOKENIZER_FILES as _TOKENIZER_FILES
from dockyard.core.config.policy import set_chat_template
from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.hf import abstract_model, save_hf

# Files of a Hugging Face folder besides the weights (copied when present).
_MODEL_FILES = ("config.json", "generation_config.json")


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"extra_state value of type {type(x).__name__} is not JSON-serialisable")


def save_checkpoint(
    path: str | Path,
    params: Any,
    opt_state: Any,
    step: int,
    extra_state: dict[str, Any] | None = None,
    model_name: str | None = None,
    *,
    tokenizer_name: str | None = None,
    chat_template: str | None = None,
    router_bias: Any = None,
) -> None:
    """Write ``params`` and ``opt_state`` (orbax) and the trainer state (JSON) to ``path``, and
    to ``hf/`` ``model_name``'s config files with the tokenizer of ``tokenizer_name`` (default:
    ``model_name``) and ``chat_template`` applied (:func:`set_chat_template`). A
    Mixture-of-Experts model's aux-loss-free ``router_bias [MoE layers, E]`` goes into the
    trainer state (:func:`load_router_bias`): it steers routing, it is not a weight."""
    final = Path(path).absolute()
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta = {"step": int(step), "model_name": model_name, "extra_state": extra_state or {}}
    if router_bias is not None:  # float32 values: exact through JSON's doubles
        meta["router_bias"] = np.asarray(router_bias, np.float32).tolist()
    (tmp / "trainer_state.json").write_text(json.dumps(meta, indent=2, default=_jsonable))
    if model_name is not None:
        _copy_files(Path(model_name), tmp / "hf", _MODEL_FILES)
        _copy_files(Path(tokenizer_name or model_name), tmp / "hf", _TOKENIZER_FILES)
        set_chat_template(tmp / "hf", chat_template)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp / "state", {"params": params, "opt_state": opt_state})
    checkpointer.wait_until_finished()
    checkpointer.close()
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)


def load_checkpoint(
    path: str | Path, params_like: Any, opt_state_like: Any
) -> tuple[Any, Any, int, dict[str, Any]]:
    """``(params, opt_state, step, extra_state)`` restored with the shapes, dtypes and
    *shardings* of ``params_like`` / ``opt_state_like`` (the current worker's arrays)."""
    root = Path(path).absolute()
    meta_file = root / "trainer_state.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file} not found: {root} is not a dockyard.jax checkpoint")
    meta = json.loads(meta_file.read_text())
    target = jax.tree.map(
        ocp.utils.to_shape_dtype_struct, {"params": params_like, "opt_state": opt_state_like}
    )
    checkpointer = ocp.StandardCheckpointer()
    restored = checkpointer.restore(root / "state", target)
    checkpointer.close()
    return restored["params"], restored["opt_state"], int(meta["step"]), meta["extra_state"]


def load_router_bias(path: str | Path) -> np.ndarray | None:
    """The ``router_bias`` :func:`save_checkpoint` saved (None: a dense model's checkpoint)."""
    meta = json.loads((Path(path).absolute() / "trainer_state.json").read_text())
    bias = meta.get("router_bias")
    return None if bias is None else np.asarray(bias, np.float32)


def _copy_files(source: Path, dest: Path, names: tuple[str, ...]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (source / name).is_file():
            shutil.copy(source / name, dest / name)


def export_hf(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the parameters of ``checkpoint`` (a folder :func:`save_checkpoint` wrote) to ``out``
    as a Hugging Face folder: float32 ``model.safetensors``, ``config.json``, the generation
    config and tokenizer files. Reads only the parameters (not the optimizer state), onto the
    host, whatever mesh saved them. ``out`` is written in place: ``dockyard.train.export`` makes
    it atomic."""
    root = Path(checkpoint).absolute()
    meta_file = root / "trainer_state.json"
    if not meta_file.is_file() or not (root / "state").is_dir():
        raise FileNotFoundError(f"{root}: no trainer_state.json and state/ here — not a "
                                "dockyard.jax checkpoint")  # fmt: skip
    source = root / "hf"
    if not (source / "config.json").is_file():  # saved before checkpoints carried hf/
        source = Path(json.loads(meta_file.read_text()).get("model_name") or root / "hf")
    cfg = ModelConfig.from_pretrained(source)
    _, abstract = abstract_model(cfg)
    target = {"params": jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, np.float32), abstract)}
    as_host = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
    checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    args = ocp.args.PyTreeRestore(item=target, restore_args=as_host, partial_restore=True)
    params = checkpointer.restore(root / "state", args=args)["params"]
    checkpointer.close()
    save_hf(cfg, params, out)
    # config.json is save_hf's; hf/'s tokenizer is the run's, with its chat template
    _copy_files(source, Path(out), ("generation_config.json", *_TOKENIZER_FILES))
    return Path(out)
