"""Hugging Face checkpoints in and out: safetensors folder ↔ (graphdef, params).

``params`` is the model's parameters as a nested dict of ``jax.Array`` (NNX's pure-dict form:
``params["model"]["layers"][0]["self_attn"]["q_proj"]["kernel"]``), which optax, orbax and
``jax.sharding`` all take as a plain pytree. ``apply(graphdef, params, ...)`` runs the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.moe import RouterOptions
from dockyard.jax.models.name_map import NNXPath, check_names, iter_hf_tensors, name_map
from dockyard.jax.models.transformer import CausalLM, SparseMoE

Params = dict[str, Any]
ShardingFn = Callable[[tuple[str | int, ...], tuple[int, ...]], Any]


def abstract_model(cfg: ModelConfig, dtype: Any = jnp.float32) -> tuple[nnx.GraphDef, Params]:
    """``(graphdef, params of jax.ShapeDtypeStruct)`` without allocating any weights."""
    model = nnx.eval_shape(lambda: CausalLM(cfg, rngs=nnx.Rngs(0), dtype=dtype))
    graphdef, state = nnx.split(model, nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def init_params(cfg: ModelConfig, seed: int = 0, dtype: Any = jnp.float32):
    """A randomly initialised model: ``(graphdef, params)``."""
    graphdef, state = nnx.split(CausalLM(cfg, rngs=nnx.Rngs(seed), dtype=dtype), nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def apply(
    graphdef: nnx.GraphDef,
    params: Params,
    input_ids: jax.Array,
    attention_mask: jax.Array | None = None,
    position_ids: jax.Array | None = None,
    *,
    router: RouterOptions | None = None,
    bias: jax.Array | None = None,
) -> jax.Array:
    """``logits [B, T, V] float32`` of the model ``(graphdef, params)``. A Mixture-of-Experts
    model routes with ``router`` (capacity, grouped experts, expert parallelism; None: the
    defaults) and the aux-loss-free ``bias [MoE layers, E]`` (None: 0)."""
    model = _merged(graphdef, params, router, bias, record=False)
    return model(input_ids, attention_mask, position_ids)


def apply_with_router_load(
    graphdef: nnx.GraphDef,
    params: Params,
    input_ids: jax.Array,
    attention_mask: jax.Array | None = None,
    *,
    router: RouterOptions | None = None,
    bias: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """``(logits, stats)``: :func:`apply`'s logits and, for a Mixture-of-Experts model, each
    sparse layer's :func:`~dockyard.jax.models.moe.router_stats` of the real tokens,
    ``stats [MoE layers, E + 2]`` float32 (loads, drops, aux loss; None for a dense model)."""
    model = _merged(graphdef, params, router, bias, record=True)
    if not _sparse(model):
        return model(input_ids, attention_mask), None
    logits, sown = nnx.capture(model, nnx.Intermediate)(input_ids, attention_mask)
    return logits, jnp.stack(jax.tree.leaves(nnx.to_pure_dict(sown)))


def _sparse(model: CausalLM) -> list[SparseMoE]:
    return [layer.mlp for layer in model.model.layers if isinstance(layer.mlp, SparseMoE)]


def _merged(
    graphdef: nnx.GraphDef,
    params: Params,
    router: RouterOptions | None,
    bias: jax.Array | None,
    record: bool,
) -> CausalLM:
    model = nnx.merge(graphdef, nnx.State(params))
    for i, moe in enumerate(_sparse(model)):
        moe.options = router or RouterOptions()
        moe.bias = None if bias is None else nnx.data(bias[i])
        moe.record_load = record
    return model


def num_sparse_layers(cfg: ModelConfig) -> int:
    """How many of ``cfg``'s layers are Mixture-of-Experts layers."""
    return sum(cfg.is_moe(i) for i in range(cfg.num_hidden_layers))


def _set(tree: Params, path: tuple[str | int, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _get(tree: Params, path: tuple[str | int, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def load_hf_params(
    cfg: ModelConfig,
    path: str | Path,
    *,
    param_dtype: Any = np.float32,
    sharding: ShardingFn | None = None,
) -> Params:
    """Read ``path``'s safetensors through the name map into ``params``.

    Args:
        param_dtype: dtype the parameters are held in (float32 master weights by default).
        sharding: ``(nnx_path, shape) -> jax.sharding.Sharding``; each tensor is placed
            directly with it (never a replicated full copy first). None: default device.
    """
    by_name = {e.hf_name: e for e in name_map(cfg)}
    params: Params = {}
    seen: set[str] = set()
    stacks: dict[NNXPath, list[np.ndarray | None]] = {}  # experts' slices, until all came

    def place(nnx_path: NNXPath, host: np.ndarray) -> None:
        target = sharding(nnx_path, host.shape) if sharding is not None else None
        _set(params, nnx_path, jax.device_put(host, target))

    for hf_name, array in iter_hf_tensors(path):
        seen.add(hf_name)
        entry = by_name.get(hf_name)
        if entry is None:
            continue
        host = entry.to_nnx(array).astype(param_dtype)
        if entry.expert is None:
            place(entry.path, host)
            continue
        parts = stacks.setdefault(entry.path, [None] * cfg.num_experts)
        parts[entry.expert] = host
        if all(p is not None for p in parts):  # the layer's experts, stacked [E, ...]
            shapes = {p.shape for p in parts if p is not None}
            if len(shapes) > 1:
                raise ValueError(f"{hf_name}: the experts' shapes differ: {sorted(shapes)}")
            place(entry.path, np.stack(parts))  # type: ignore[arg-type]
            del stacks[entry.path]
    check_names(cfg, seen)
    _check_shapes(cfg, params)
    return params


def _check_shapes(cfg: ModelConfig, params: Params) -> None:
    _, abstract = abstract_model(cfg)
    for entry in name_map(cfg):
        want = _get(abstract, entry.path).shape
        got = _get(params, entry.path).shape
        if entry.expert is not None:
            want, got = want[1:], got[1:]
        if want != got:
            raise ValueError(
                f"{entry.hf_name}: shape {entry.to_hf(np.empty(got)).shape} in the checkpoint, "
                f"config.json implies {entry.to_hf(np.empty(want)).shape}"
            )


def load_hf_model(
    path: str | Path, *, param_dtype: Any = np.float32, sharding: ShardingFn | None = None
) -> tuple[ModelConfig, nnx.GraphDef, Params]:
    """``(config, graphdef, params)`` of the HF folder ``path``."""
    cfg = ModelConfig.from_pretrained(path)
    graphdef, _ = abstract_model(cfg)
    return cfg, graphdef, load_hf_params(cfg, path, param_dtype=param_dtype, sharding=sharding)


def iter_hf_weights(
    cfg: ModelConfig, params: Params, dtype: Any = None
) -> Iterator[tuple[str, np.ndarray]]:
    """``(HF name, host array in HF layout)`` for every parameter, in name-map order.

    Sharded arrays are gathered one tensor at a time; ``dtype`` converts (None: keep)."""
    stacked: dict[NNXPath, np.ndarray] = {}  # one layer's experts, each gathered once
    for entry in name_map(cfg):
        if entry.expert is None:
            stacked.clear()
            host = np.asarray(jax.device_get(_get(params, entry.path)))
        else:
            if entry.path not in stacked:
                stacked[entry.path] = np.asarray(jax.device_get(_get(params, entry.path)))
            host = stacked[entry.path][entry.expert]
        if dtype is not None:
            host = host.astype(dtype)
        yield entry.hf_name, entry.to_hf(host)


def save_hf(cfg: ModelConfig, params: Params, path: str | Path, dtype: Any = None) -> None:
    """Write ``config.json`` + ``model.safetensors`` that transformers and vLLM load."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tensors = dict(iter_hf_weights(cfg, params, dtype))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_config = dict(cfg.hf_config)
    if dtype is not None:
        hf_config["dtype"] = np.dtype(dtype).name
    (out / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
