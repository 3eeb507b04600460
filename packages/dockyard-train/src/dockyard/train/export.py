"""A checkpoint's policy as a Hugging Face folder: ``export_hf(checkpoint, out)``.

``checkpoint`` is any of the three folders of a run's checkpoints
(:mod:`dockyard.train.checkpoint`):

====================================  ======================================================
``checkpoint_dir``                    the newest *complete* ``step_<n>/`` in it (``done``)
``checkpoint_dir/step_<n>/``          that step (refused without its ``done`` marker)
``checkpoint_dir/step_<n>/policy/``   the trainer's own checkpoint, the folder that holds the
                                      weights (a trainer's ``save_checkpoint`` folder works
                                      too, inside a run's checkpoint or not)
====================================  ======================================================

The trainer that wrote ``policy/`` is told by its files — ``trainer_state.pt`` + ``dcp/``:
torch (:func:`dockyard.torch.checkpoint.export_hf`), ``trainer_state.json`` + ``state/``: JAX
(:func:`dockyard.jax.checkpoint.export_hf`) — and that package writes the folder: float32
safetensors, ``config.json``, ``generation_config.json`` and the tokenizer files with the chat
template, so ``AutoModelForCausalLM.from_pretrained(out)`` and ``AutoTokenizer.from_pretrained
(out)`` load it offline, and vLLM serves it. LoRA adapters are merged into the base weights.

``out`` is written beside itself under a temporary name and renamed into place: a crash leaves
no half-written folder. An existing non-empty ``out`` is an error unless ``force`` (then it is
replaced). Errors a user can fix raise :class:`ExportError` (``dockyard export`` prints them).
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dockyard.train.checkpoint import latest_checkpoint

__all__ = ["ExportError", "export_hf", "resolve_checkpoint"]

_BACKENDS = {
    "torch": (("trainer_state.pt", "dcp"), "dockyard.torch.checkpoint", "torch"),
    "jax": (("trainer_state.json", "state"), "dockyard.jax.checkpoint", "jax"),
}


class ExportError(ValueError):
    """A checkpoint that cannot be exported, or an ``out`` that would be overwritten."""


def _backend(folder: Path) -> str | None:
    """``"torch"`` / ``"jax"`` when ``folder`` is that trainer's checkpoint, else None."""
    for name, (files, _, _) in _BACKENDS.items():
        if all((folder / f).exists() for f in files):
            return name
    return None


def _check_done(step: Path) -> None:
    if step.name.startswith("step_") and not (step / "done").exists():
        raise ExportError(
            f"{step}: incomplete checkpoint (no 'done' marker: its save was cut short); "
            "export an earlier step_<n> or the checkpoint_dir (its newest complete step)"
        )


def _latest_step(root: Path) -> Path:
    """The newest complete ``step_<n>/`` of the checkpoint_dir ``root``."""
    latest = latest_checkpoint(root)
    if latest is not None:
        return latest
    steps = sorted(p.name for p in root.glob("step_*") if p.is_dir())
    if steps:
        raise ExportError(f"{root}: none of its step_<n> folders is complete (no 'done' "
                          f"marker): {', '.join(steps)}")  # fmt: skip
    raise ExportError(f"{root}: not a checkpoint (expected a checkpoint_dir with step_<n>/, a "
                      "step_<n>/ folder, or its policy/)")  # fmt: skip


def resolve_checkpoint(checkpoint: str | Path) -> tuple[Path, str]:
    """``(policy folder, backend)`` of ``checkpoint`` (see the module docstring)."""
    path = Path(checkpoint)
    if not path.is_dir():
        raise ExportError(f"{path}: " + ("not a folder" if path.exists() else "no such folder"))
    if _backend(path) is None and not (path / "policy").is_dir():
        path = _latest_step(path)
    if (path / "policy").is_dir():
        _check_done(path)
        path = path / "policy"
    elif path.name == "policy":
        _check_done(path.parent)
    backend = _backend(path)
    if backend is None:
        raise ExportError(f"{path}: not a torch or JAX trainer checkpoint (no trainer_state.pt "
                          "+ dcp/, nor trainer_state.json + state/)")  # fmt: skip
    return path, backend


def _writer(backend: str):
    _, module, extra = _BACKENDS[backend]
    try:
        return importlib.import_module(module).export_hf
    except ImportError as exc:
        raise ImportError(
            f'exporting a {backend} checkpoint needs pip install "dockyard-train[{extra}]" ({exc})'
        ) from exc


def _check_out(out: Path, force: bool) -> None:
    if not out.exists() or force:
        return
    if out.is_dir() and not any(out.iterdir()):
        return
    raise ExportError(f"{out} exists and is not empty: choose another folder or pass --force "
                      "(force=True) to replace it")  # fmt: skip


def export_hf(checkpoint: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write ``checkpoint``'s policy to ``out`` as a Hugging Face folder; returns ``out``.

    Args:
        checkpoint: a ``checkpoint_dir``, a ``step_<n>/`` folder or its ``policy/``.
        out: the folder to write (created with its parents).
        force: replace ``out`` when it exists and is not empty.
    """
    policy, backend = resolve_checkpoint(checkpoint)
    write = _writer(backend)
    return write_folder(out, lambda tmp: write(policy, tmp), force=force)


def write_folder(out: str | Path, write: Callable[[Path], Any], *, force: bool = False) -> Path:
    """``write(tmp)`` a folder next to ``out``, then put it in ``out``'s place (atomic: ``out``
    is either its old content or the whole new folder); ``force`` as in :func:`export_hf`."""
    out = Path(out).absolute()
    _check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    for stale in (tmp, old):  # left by an export killed on the way
        shutil.rmtree(stale, ignore_errors=True)
    try:
        write(tmp)
        _swap(tmp, out, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _swap(tmp: Path, out: Path, old: Path) -> None:
    """Rename ``tmp`` to ``out``; a previous ``out`` is kept as ``old`` until that succeeds."""
    if out.is_dir():
        out.rename(old)
    elif out.exists():
        out.unlink()
    try:
        tmp.rename(out)
    except BaseException:
        if old.exists():
            old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
