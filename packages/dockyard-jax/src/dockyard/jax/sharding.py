"""Parameters and batches over a ``jax.sharding`` device mesh with axes ``("fsdp", "tensor")``.

* ``fsdp`` (data + fully-sharded parameters): the batch's sequences are split over it and every
  weight matrix is sharded over it along one dimension; XLA all-gathers a weight where it is
  used and reduce-scatters its gradient (ZeRO-3 / FSDP, expressed as sharding annotations).
* ``tensor`` (Megatron-style): column-parallel ``q/k/v/gate/up`` kernels ``[in, out]`` are split
  over their output dimension, row-parallel ``o/down`` over their input dimension, the
  embedding and ``lm_head`` over the vocabulary.

=========================  ======================  ===========
parameter                  layout                  spec
=========================  ======================  ===========
q/k/v/gate/up ``kernel``   ``[in, out]``           (fsdp, tensor)
o/down ``kernel``          ``[in, out]``           (tensor, fsdp)
column ``bias``            ``[out]``               (tensor,)
embedding                  ``[vocab, hidden]``     (tensor, fsdp)
experts' stacked weights   ``[E, in, out]``        (fsdp, None, None)
``lm_head.kernel``         ``[hidden, vocab]``     (fsdp, tensor)
norms, row ``bias``        ``[d]``                 replicated
=========================  ======================  ===========

A Mixture-of-Experts layer's experts are split over ``fsdp`` by expert: with
``policy.moe.expert_parallel_size`` equal to the axis each device runs its own experts
(:func:`dockyard.jax.models.moe.experts_parallel`: the tokens move, the experts never do),
otherwise XLA's partitioner chooses what to move. A dimension that the axis size does not divide is left unsharded on that axis (never an error),
so any tiny model runs on any mesh. Sharding changes where numbers live, not the maths: the
sharded step equals the single-device step (a test holds it to fp32 tolerance).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

FSDP, TENSOR = "fsdp", "tensor"
_COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROW = ("o_proj", "down_proj")
_EXPERTS = ("gate_proj", "up_proj", "down_proj")


def make_mesh(fsdp_size: int = -1, tensor_parallel_size: int = 1, devices=None) -> Mesh:
    """A ``(fsdp, tensor)`` mesh over ``devices`` (default: all of ``jax.devices()``)."""
    devices = list(devices if devices is not None else jax.devices())
    tp = tensor_parallel_size
    if len(devices) % tp:
        raise ValueError(
            f"mesh.tensor_parallel_size={tp} does not divide the {len(devices)} devices"
        )
    fsdp = len(devices) // tp if fsdp_size == -1 else fsdp_size
    if fsdp * tp > len(devices):
        raise ValueError(
            f"mesh.fsdp_size={fsdp} × mesh.tensor_parallel_size={tp} needs {fsdp * tp} devices; "
            f"{len(devices)} are visible (fake CPU devices: "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)"
        )
    grid = np.array(devices[: fsdp * tp]).reshape(fsdp, tp)
    return Mesh(grid, (FSDP, TENSOR))


def param_spec(path: tuple[Any, ...], shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    """The :class:`PartitionSpec` of the parameter at NNX ``path`` (table in the module doc)."""
    names = [p for p in path if isinstance(p, str)]
    leaf, owner = names[-1], names[-2] if len(names) > 1 else ""
    if leaf == "embedding":
        axes: tuple[Any, ...] = (TENSOR, FSDP)
    elif owner == "experts" and leaf in _EXPERTS:
        axes = (FSDP, None, None)
    elif leaf == "kernel" and owner in _ROW:
        axes = (TENSOR, FSDP)
    elif leaf == "kernel":  # column-parallel projections and lm_head
        axes = (FSDP, TENSOR)
    elif leaf == "bias" and owner in _COLUMN:
        axes = (TENSOR,)
    else:
        axes = (None,) * len(shape)
    fitted = [
        ax if ax is not None and dim % mesh.shape[ax] == 0 and mesh.shape[ax] > 1 else None
        for ax, dim in zip(axes, shape, strict=True)
    ]
    return PartitionSpec(*fitted)


def param_sharding(mesh: Mesh):
    """``(path, shape) -> NamedSharding``, as ``load_hf_params(sharding=...)`` takes it."""
    return lambda path, shape: NamedSharding(mesh, param_spec(path, tuple(shape), mesh))


def tree_shardings(params: Any, mesh: Mesh) -> Any:
    """The pytree of :class:`NamedSharding` matching ``params``."""
    return jax.tree_util.tree_map_with_path(
        lambda kp, x: NamedSharding(mesh, param_spec(_keys(kp), tuple(x.shape), mesh)), params
    )


def shard_params(params: Any, mesh: Mesh) -> Any:
    """Place ``params`` on ``mesh`` with :func:`tree_shardings`."""
    return jax.device_put(params, tree_shardings(params, mesh))


def batch_sharding(mesh: Mesh, batch_size: int, ndim: int) -> NamedSharding:
    """Sequences over ``fsdp`` (replicated when ``fsdp`` does not divide ``batch_size``)."""
    lead = FSDP if batch_size % mesh.shape[FSDP] == 0 and mesh.shape[FSDP] > 1 else None
    return NamedSharding(mesh, PartitionSpec(lead, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def _keys(key_path: Any) -> tuple[Any, ...]:
    out = []
    for k in key_path:
        out.append(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
    return tuple(out)
