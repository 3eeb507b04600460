"""Mixture-of-Experts routing and expert computation for :class:`~.transformer.SparseMoE`,
the same maths as the torch worker's (:mod:`dockyard.torch.moe.routing`).

For tokens ``x [N, H]``, router logits ``z = x W_r`` and top-k ``k``:

    s = softmax(z)                              [N, E] float32 (Qwen3-MoE's scores)
    S = top-k_i (s_i + b_i)                     expert choice; b [E] only steers the choice
    g_i = s_i / Σ_{j∈S} s_j  (i ∈ S)            gates (``norm_topk_prob``; else g_i = s_i)

* ``b`` is DeepSeek-V3's aux-loss-free bias: the worker keeps it outside the parameters (it is
  not trained by gradients, not exported) and moves it after each step by ``γ·sign(c̄ − c)``
  (:func:`bias_update`); with ``b = 0`` the choice is Hugging Face's ``topk(s)``.
* **Capacity** (optional): expert ``i`` keeps at most ``C = ⌈f·N·k/E⌉`` of its assignments of
  real tokens (``N`` real tokens), highest ``s_ti`` first; padding takes no slot.
* **Switch aux loss** (per layer): ``L_aux = E · Σ_i f_i · P_i``, ``f_i = c_i / N`` over the
  real tokens' choices and ``P_i`` their mean score.
* **Expert parallelism** (:func:`experts_parallel`, Megatron-LM's *all-gather* token dispatch):
  the experts are split over the mesh's ``fsdp`` axis; every device gathers the tokens and
  their routing, runs its own ``E/ep`` experts on the assignments that chose them, and a
  reduce-scatter sums the partial outputs back to the devices that own the tokens. Expert
  weights never move; the result equals one device's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P


@dataclasses.dataclass(frozen=True)
class RouterOptions:
    """Static routing options (part of the jit cache key): ``capacity_factor`` (None:
    dropless), ``grouped`` experts (``ragged_dot``; else every expert on every token) and the
    expert-parallel ``mesh`` (None: every expert on every device) whose ``axis`` splits them."""

    capacity_factor: float | None = None
    grouped: bool = True
    mesh: Any = None
    axis: str = "fsdp"


class Routing(NamedTuple):
    """``experts [N, k]`` int, ``gates [N, k]`` float32 (0 where dropped), ``keep [N, k]``,
    ``probs [N, E]`` float32 scores."""

    experts: jax.Array
    gates: jax.Array
    keep: jax.Array
    probs: jax.Array


def route(
    logits: jax.Array,
    top_k: int,
    norm_topk_prob: bool,
    bias: jax.Array | None = None,
    capacity_factor: float | None = None,
    real: jax.Array | None = None,
) -> Routing:
    """Route ``N`` tokens from router ``logits [N, E]`` (module docstring); ``real [N]`` bool
    marks the real tokens (None: all)."""
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    choice = probs if bias is None else probs + bias.astype(jnp.float32)
    _, experts = jax.lax.top_k(choice, top_k)
    chosen = jnp.take_along_axis(probs, experts, axis=-1)
    gates = chosen / jnp.sum(chosen, axis=-1, keepdims=True) if norm_topk_prob else chosen
    keep = jnp.ones(experts.shape, bool)
    if capacity_factor is not None:
        keep = within_capacity(experts, jax.lax.stop_gradient(chosen), probs.shape[-1],
                               capacity_factor, real)  # fmt: skip
    return Routing(experts, gates * keep, keep, probs)


def within_capacity(
    experts: jax.Array,
    score: jax.Array,
    num_experts: int,
    factor: float,
    real: jax.Array | None = None,
) -> jax.Array:
    """``[N, k]`` bool: each expert's ``⌈factor·N_real·k/E⌉`` highest-scored assignments of
    real tokens (ties: the earlier assignment first, as torch's stable sorts)."""
    n, k = experts.shape
    flat_e, flat_s = experts.reshape(-1), score.reshape(-1)
    flat_r = jnp.ones(n * k, bool) if real is None else jnp.repeat(real.astype(bool), k)
    flat_s = jnp.where(flat_r, flat_s, -1.0)  # scores are >= 0: padding ranks last
    order = jnp.lexsort((-flat_s, flat_e))  # by expert, then score descending (stable)
    counts = jnp.bincount(flat_e, length=num_experts)
    starts = jnp.cumsum(counts) - counts
    rank = jnp.arange(n * k) - starts[flat_e[order]]
    # ⌈f·N_real·k/E⌉ in float32 (torch's product is a Python float: equal unless f·N·k/E
    # lies within float32 rounding of an integer)
    capacity = jnp.ceil(factor * jnp.sum(flat_r).astype(jnp.float32) / num_experts)
    keep = jnp.zeros(n * k, bool).at[order].set(rank < capacity)
    return (keep & flat_r).reshape(n, k)


def router_stats(routing: Routing, num_experts: int, real: jax.Array | None) -> jax.Array:
    """``[E + 2]`` float32: the real tokens' assignments per expert (before drops), the real
    assignments dropped, and the layer's Switch aux loss (differentiable through ``probs``)."""
    n = routing.experts.shape[0]
    w = jnp.ones(n, jnp.float32) if real is None else real.astype(jnp.float32)
    chosen = jax.nn.one_hot(routing.experts, num_experts, dtype=jnp.float32)
    load = jnp.einsum("nke,n->e", chosen, w)
    dropped = jnp.sum((~routing.keep) * w[:, None])
    n_real = jnp.maximum(jnp.sum(w), 1.0)
    mean_probs = jnp.einsum("ne,n->e", routing.probs, w) / n_real
    aux = num_experts * jnp.sum(jax.lax.stop_gradient(load) / n_real * mean_probs)
    return jnp.concatenate([load, dropped[None], aux[None]])


def bias_update(load: np.ndarray, rate: float) -> np.ndarray:
    """DeepSeek-V3's step ``γ·sign(c̄ − c)`` for per-layer loads ``load [L, E]`` (0 for a layer
    that saw no token), float32 as the torch worker's."""
    c = np.asarray(load, np.float32)
    step = np.float32(rate) * np.sign(c.mean(axis=-1, keepdims=True) - c)
    return np.where(c.sum(axis=-1, keepdims=True) > 0, step, np.float32(0)).astype(np.float32)


TILE_ROWS = 32  # rows of one expert per GEMM in experts_grouped (bench/jax_moe.py: 32-64 on CPU)


def experts_grouped(
    x: jax.Array, experts: jax.Array, gates: jax.Array, w: tuple[jax.Array, ...], num: int,
    tile: int = TILE_ROWS,
) -> jax.Array:  # fmt: skip
    """``Σ_k g_k · expert_k(x)`` for ``x [N, H]`` as a block-sparse grouped GEMM (MegaBlocks'
    layout in plain JAX): the N·k assignments sorted by expert, each expert's rows padded to a
    multiple of ``tile``, so that every tile of ``tile`` rows belongs to one expert, and one
    SwiGLU per tile (``lax.map``: three ``[tile, H] @ [H, I]``-sized GEMMs with that expert's
    weights). The shapes are static — at most ``⌈N·k/tile⌉ + E`` tiles — and the FLOPs those of
    the real assignments plus at most ``tile − 1`` padding rows per expert. Experts ``>= num``
    (another device's) get no rows and their gate is 0."""
    wg, wu, wd = w
    n, k = experts.shape
    m = n * k
    flat = experts.reshape(-1)
    counts = jnp.bincount(flat, length=num)  # experts >= num are not counted
    padded = (counts + tile - 1) // tile * tile
    ends = jnp.cumsum(padded)  # each expert's padded block ends here
    order = jnp.argsort(flat, stable=True)  # assignments by expert
    by_expert = flat[order]
    here = by_expert < num
    e = jnp.minimum(by_expert, num - 1)
    rank = jnp.arange(m) - (jnp.cumsum(counts) - counts)[e]  # position within its expert
    rows = -(-m // tile) * tile + num * tile  # static bound on the padded rows
    slot = jnp.where(here, ends[e] - padded[e] + rank, rows)  # row `rows`: nowhere (dropped)
    buf = jnp.zeros((rows + 1, x.shape[1]), x.dtype).at[slot].set(x[order // k])
    tiles = rows // tile
    owner = jnp.minimum(jnp.searchsorted(ends, jnp.arange(tiles) * tile, side="right"), num - 1)

    def swiglu(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        block, i = args
        return (jax.nn.silu(block @ wg[i]) * (block @ wu[i])) @ wd[i]

    out = jax.lax.map(swiglu, (buf[:rows].reshape(tiles, tile, -1), owner)).reshape(rows, -1)
    out = jnp.concatenate([out, jnp.zeros((1, out.shape[1]), out.dtype)])
    per = jnp.zeros((m, out.shape[1]), out.dtype).at[order].set(out[slot])
    return jnp.sum(per.reshape(n, k, -1) * gates[..., None].astype(out.dtype), axis=1)


def experts_ragged(
    x: jax.Array, experts: jax.Array, gates: jax.Array, w: tuple[jax.Array, ...], num: int
) -> jax.Array:
    """:func:`experts_grouped` with ``jax.lax.ragged_dot`` for each projection (one call over
    the assignments sorted by expert). Equal; not the worker's path: XLA:CPU expands
    ``ragged_dot`` into a dense product per group (k times the dense fallback's FLOPs;
    ``bench/jax_moe.py``), and it is kept for the GPU check to compare."""
    wg, wu, wd = w
    n, k = experts.shape
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    rows = x[order // k]  # assignment order -> its token's activations, by expert
    sizes = jnp.bincount(flat, length=num).astype(jnp.int32)
    g = jax.lax.ragged_dot(rows, wg, sizes)
    u = jax.lax.ragged_dot(rows, wu, sizes)
    out = jax.lax.ragged_dot(jax.nn.silu(g) * u, wd, sizes)
    unsorted = jnp.zeros_like(out).at[order].set(out).reshape(n, k, -1)
    return jnp.sum(unsorted * gates[..., None].astype(out.dtype), axis=1)


def experts_dense(
    x: jax.Array, experts: jax.Array, gates: jax.Array, w: tuple[jax.Array, ...], num: int
) -> jax.Array:
    """Every expert on every token, gated by a dense ``[N, E]`` matrix zero off the top k
    (``E/k`` times the FLOPs of :func:`experts_grouped`; equal, tested)."""
    wg, wu, wd = w
    dense = jnp.sum(jax.nn.one_hot(experts, num, dtype=x.dtype) * gates[..., None].astype(x.dtype),
                    axis=1)  # fmt: skip
    g = jnp.einsum("nh,ehi->eni", x, wg)
    u = jnp.einsum("nh,ehi->eni", x, wu)
    out = jnp.einsum("eni,eih->enh", jax.nn.silu(g) * u, wd)
    return jnp.einsum("enh,ne->nh", out, dense)


def experts_parallel(
    x: jax.Array, experts: jax.Array, gates: jax.Array, w: tuple[jax.Array, ...],
    options: RouterOptions,
) -> jax.Array:  # fmt: skip
    """:func:`experts_grouped` with the experts split over ``options.axis`` of
    ``options.mesh`` (the all-gather dispatch of the module docstring). Tokens are split over
    the axis when it divides ``N`` (gather, then reduce-scatter) and replicated otherwise
    (each device has them all: a sum of the partial outputs)."""
    mesh, axis = options.mesh, options.axis
    ep = mesh.shape[axis]
    n = x.shape[0]
    split = n % ep == 0
    run = experts_grouped if options.grouped else experts_dense

    def local(x, experts, gates, wg, wu, wd):
        if split:
            x, experts, gates = (jax.lax.all_gather(a, axis, tiled=True)
                                 for a in (x, experts, gates))  # fmt: skip
        num = wg.shape[0]
        lo = jax.lax.axis_index(axis) * num
        mine = (experts >= lo) & (experts < lo + num)
        y = run(x, jnp.where(mine, experts - lo, num), jnp.where(mine, gates, 0.0),
                (wg, wu, wd), num)  # fmt: skip
        if split:
            return jax.lax.psum_scatter(y, axis, scatter_dimension=0, tiled=True)
        return jax.lax.psum(y, axis)

    tokens = P(axis) if split else P()
    wspec = P(axis)
    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(tokens, tokens, tokens, wspec, wspec, wspec),
        out_specs=tokens,
        check_vma=False,
    )
    return fn(x, experts, gates, *w)


def check_expert_parallel(num_experts: int, ep: int, mesh_shape: dict[str, int]) -> None:
    """Refuse an expert-parallel size the JAX worker cannot run, naming the fix."""
    if ep == 1:
        return
    fsdp, tp = mesh_shape.get("fsdp", 1), mesh_shape.get("tensor", 1)
    if ep != fsdp or tp != 1:
        raise ValueError(
            f"policy.moe.expert_parallel_size={ep}: the JAX worker splits the experts over the "
            f"whole fsdp axis ({fsdp} devices here) with tensor_parallel_size 1 (here {tp}); "
            f"set expert_parallel_size to 1 or {fsdp}"
        )
    if num_experts % ep:
        raise ValueError(
            f"policy.moe.expert_parallel_size={ep} does not divide the model's {num_experts} "
            "experts"
        )


__all__ = [
    "RouterOptions",
    "Routing",
    "bias_update",
    "check_expert_parallel",
    "experts_dense",
    "experts_grouped",
    "experts_parallel",
    "experts_ragged",
    "route",
    "router_stats",
    "within_capacity",
]
