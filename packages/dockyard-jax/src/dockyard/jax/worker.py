"""The JAX policy worker: a Flax NNX model loaded from HF safetensors, trained with optax.

One process drives every device of its mesh (``jax.sharding``; see :mod:`dockyard.jax.sharding`):
parameters and optimizer state are sharded over ``(fsdp, tensor)``, each micro-batch's
sequences over ``fsdp``. A train step is

    N_tok = Σ_b,t loss_mask,   N_seq = #{b : Σ_t loss_mask_bt > 0}
    g = Σ_μ ∇ L_μ,   L_μ = loss_fn(logprobs_μ, {fields of μ, num_loss_tokens=N_tok,
                                                 num_sequences=N_seq})
    clip ‖g‖ to max_grad_norm;  AdamW with η_t = η·f(t)

exactly as the torch worker computes it (``dockyard.torch.worker``), so the two backends are
interchangeable behind :class:`~dockyard.core.interfaces.PolicyWorker` (a parity test holds
them to fp32 tolerance). Micro-batches are trimmed to their longest sequence and padded up to a
multiple of ``pad_to_multiple`` so that jit compiles a handful of shapes, not one per step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dockyard.core.config.optim import lr_factor
from dockyard.core.experience import Batch
from dockyard.core.interfaces.policy import LossFn, PolicyWorker, TrainMetrics
from dockyard.core.rl.metrics import add_metric, final_metrics, router_metrics
from dockyard.jax import checkpoint as ckpt
from dockyard.jax import sharding as shd
from dockyard.jax.config import JaxPolicyConfig
from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.hf import (
    abstract_model,
    iter_hf_weights,
    load_hf_params,
    num_sparse_layers,
    save_hf,
)
from dockyard.jax.models.moe import RouterOptions, bias_update, check_expert_parallel
from dockyard.jax.optim import build_optimizer
from dockyard.jax.step import (
    make_entropy_fn,
    make_grad_fn,
    make_logprob_fn,
    make_topk_fn,
    make_update_fn,
    tree_add,
)

_TOKEN_FIELDS = ("loss_mask", "advantages", "gen_logprobs", "prev_logprobs", "ref_logprobs")


def bucketed(
    tensors: Iterator[tuple[str, np.ndarray]], bucket_bytes: int
) -> Iterator[dict[str, np.ndarray]]:
    """Group ``(name, array)`` into dicts of at most ``bucket_bytes`` (a larger tensor alone)."""
    bucket: dict[str, np.ndarray] = {}
    size = 0
    for name, array in tensors:
        if bucket and size + array.nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = array
        size += array.nbytes
    if bucket:
        yield bucket


class JaxPolicyWorker(PolicyWorker):
    """See the module docstring. ``config``: a :class:`JaxPolicyConfig` or a dict of one;
    ``mesh``: a ``("fsdp", "tensor")`` mesh (default: built from ``config.mesh``);
    ``rank`` / ``world_size``: accepted for the torch worker's calling convention (Ray fleets);
    only a single process (rank 0 of 1) is supported."""

    def __init__(
        self,
        config: JaxPolicyConfig | Mapping[str, Any],
        mesh: jax.sharding.Mesh | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if (world_size or 1) > 1 or (rank or 0) > 0:
            raise ValueError(
                f"JaxPolicyWorker(rank={rank}, world_size={world_size}): one JAX process drives "
                "all its devices through the mesh; start a single worker (world_size=1) and set "
                "policy.jax_cfg.fsdp_size / tensor_parallel_size (multi-host jax.distributed is "
                "not supported yet)"
            )
        cfg = config if isinstance(config, JaxPolicyConfig) else JaxPolicyConfig(**config)
        self.cfg = cfg
        self.mesh = mesh or shd.make_mesh(cfg.mesh.fsdp_size, cfg.mesh.tensor_parallel_size)
        self.model_cfg = ModelConfig.from_pretrained(cfg.model_name)
        on_cpu = self.mesh.devices.flat[0].platform == "cpu"
        precision = cfg.precision if cfg.precision != "auto" else ("float32" if on_cpu else
                                                                   "bfloat16")  # fmt: skip
        self.compute_dtype = jnp.dtype(precision)
        self.graphdef, _ = abstract_model(self.model_cfg, self.compute_dtype)
        self._init_router()
        self.params = load_hf_params(
            self.model_cfg, cfg.model_name, sharding=shd.param_sharding(self.mesh)
        )
        self.shardings = shd.tree_shardings(self.params, self.mesh)
        # Arrays are immutable and never donated: the initial weights *are* the reference.
        self.ref_params = self.params if cfg.reference_policy else None
        self.tx = build_optimizer(cfg.optimizer, cfg.scheduler)
        # Optimizer moments are sharded like their parameters; scalars (counts) replicated.
        self.opt_shardings = optax.tree_map_params(
            self.tx,
            lambda _, sharding: sharding,
            jax.eval_shape(self.tx.init, self.params),
            self.shardings,
            transform_non_params=lambda _: shd.replicated(self.mesh),
        )
        self.opt_state = jax.jit(self.tx.init, out_shardings=self.opt_shardings)(self.params)
        self._step = 0
        tau = cfg.generation_temperature
        self._logprob_fn = make_logprob_fn(self.graphdef, tau, self.router)
        self._update_fn = make_update_fn(
            self.tx, cfg.max_grad_norm, (self.shardings, self.opt_shardings,
                                         shd.replicated(self.mesh))
        )  # fmt: skip
        self._topk_fns: dict[int, Any] = {}

    def _init_router(self) -> None:
        """A Mixture-of-Experts model's routing (``policy.moe``): the static options, the
        aux-loss-free bias ``[MoE layers, E]`` (0 at the start; the reference keeps 0) and the
        expert-parallel layout (experts split over the ``fsdp`` axis)."""
        moe, n = self.cfg.moe, num_sparse_layers(self.model_cfg)
        self.router: RouterOptions | None = None
        self.router_bias: jax.Array | None = None
        self.ref_router_bias: jax.Array | None = None
        ep = moe.expert_parallel_size
        if not n:
            if ep > 1:
                raise ValueError(f"moe.expert_parallel_size={ep}: {self.cfg.model_name} has no "
                                 "experts (a dense model); set it to 1")  # fmt: skip
            return
        check_expert_parallel(self.model_cfg.num_experts, ep, dict(self.mesh.shape))
        self.router = RouterOptions(
            capacity_factor=moe.expert_capacity_factor,
            grouped=moe.grouped_gemm,
            mesh=self.mesh if ep > 1 else None,
            axis=shd.FSDP,
        )
        zeros = np.zeros((n, self.model_cfg.num_experts), np.float32)
        self.router_bias = self.ref_router_bias = jax.device_put(zeros, shd.replicated(self.mesh))

    def _update_router_bias(self, load: np.ndarray) -> None:
        moe = self.cfg.moe
        if self.router_bias is None or not moe.router_enable_expert_bias:
            return
        if moe.router_bias_update_rate > 0:
            new = np.asarray(self.router_bias) + bias_update(load, moe.router_bias_update_rate)
            self.router_bias = jax.device_put(new, shd.replicated(self.mesh))

    def _bias(self) -> jax.Array | None:
        """The bias the routing uses (None when off: then 0)."""
        return self.router_bias if self.cfg.moe.router_enable_expert_bias else None

    def _ref_bias(self) -> jax.Array | None:
        return self.ref_router_bias if self.cfg.moe.router_enable_expert_bias else None

    # ----------------------------------------------------------------- helpers
    @property
    def step(self) -> int:
        return self._step

    def _width(self, lengths: np.ndarray) -> int:
        m = self.cfg.pad_to_multiple
        return max(-(-int(lengths.max()) // m) * m, 2)

    def _put(self, array: np.ndarray) -> jax.Array:
        """A micro-batch array, its sequences split over the ``fsdp`` axis."""
        return jax.device_put(array, shd.batch_sharding(self.mesh, array.shape[0], array.ndim))

    def _micro(self, batch: Batch, idx: np.ndarray, width: int):
        """``(ids [b, width] int32, mask [b, width] bool)`` of rows ``idx`` (zero padded)."""
        ids = _fit(np.asarray(batch.input_ids)[idx], width).astype(np.int32)
        mask = _fit(np.asarray(batch.attention_mask, dtype=bool)[idx], width)
        return self._put(ids), self._put(mask)

    def _chunks(self, n: int, size: int) -> list[np.ndarray]:
        return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]

    def _logprobs(self, params: Any, batch: Batch, bias: Any) -> np.ndarray:
        _unconstrained(batch)
        return self._per_token(self._logprob_fn, params, batch, bias)

    def _per_token(self, fn: Any, params: Any, batch: Batch, bias: Any) -> np.ndarray:
        """``[B, T] float32`` from ``fn(params, ids, mask, bias) -> [b, width]``, chunk by
        chunk."""
        B, T = batch.shape
        lengths = np.asarray(batch.attention_mask, dtype=bool).sum(axis=1)
        out = np.zeros((B, T), np.float32)
        for idx in self._chunks(B, self.cfg.logprob_batch_size):
            ids, mask = self._micro(batch, idx, self._width(lengths[idx]))
            out[idx] = _fit(np.asarray(fn(params, ids, mask, bias)), T)
        return out

    # -------------------------------------------------------------- interface
    def get_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` logprobs of ``batch.input_ids`` (alignment: :mod:`.step`)."""
        return self._logprobs(self.params, batch, self._bias())

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        """Logprobs under the initial weights (the frozen reference)."""
        if self.ref_params is None:
            raise RuntimeError("no reference policy: this worker was built with "
                               "reference_policy=false")  # fmt: skip
        return self._logprobs(self.ref_params, batch, self._ref_bias())

    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(values [B, T, k] float32, indices [B, T, k] int64)``, aligned like logprobs."""
        B, T = batch.shape
        lengths = np.asarray(batch.attention_mask, dtype=bool).sum(axis=1)
        fn = self._topk_fns.setdefault(k, make_topk_fn(self.graphdef, k, self.router))
        values = np.zeros((B, T, k), np.float32)
        indices = np.zeros((B, T, k), np.int64)
        for idx in self._chunks(B, self.cfg.logprob_batch_size):
            ids, mask = self._micro(batch, idx, self._width(lengths[idx]))
            v, j = fn(self.params, ids, mask, self._bias())
            values[idx] = _fit(np.asarray(v), T)
            indices[idx] = _fit(np.asarray(j), T)
        return values, indices

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` entropy of each token's distribution (as the torch worker's)."""
        fn = make_entropy_fn(self.graphdef, self.cfg.generation_temperature, self.router)
        return self._per_token(fn, self.params, batch, self._bias())

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """One optimizer step over ``batch``; metrics as the torch worker reports them."""
        t0 = time.perf_counter()
        B, _ = batch.shape
        lengths = np.asarray(batch.attention_mask, dtype=bool).sum(axis=1)
        loss_mask = np.asarray(batch.loss_mask, dtype=bool)
        n_tok = float(loss_mask.sum())
        n_seq = float((loss_mask.sum(axis=1) > 0).sum())
        fields = _batch_fields(batch)
        moe = self.cfg.moe
        aux_coeff = moe.aux_loss_coeff if moe.router_load_balancing_type == "aux_loss" else 0.0
        grad_fn = make_grad_fn(self.graphdef, loss_fn, self.cfg.generation_temperature,
                               self.shardings, self.router, aux_coeff)  # fmt: skip
        counts = {"num_loss_tokens": jnp.float32(n_tok), "num_sequences": jnp.float32(n_seq)}
        grads, stats, aux = None, None, 0.0
        sums: dict[str, float] = {}
        forwarded = 0  # padding included; JAX forwards every row whole (no prefix trees)
        for idx in self._chunks(B, self.cfg.train_micro_batch_size):
            width = self._width(lengths[idx])
            ids, mask = self._micro(batch, idx, width)
            forwarded += ids.shape[0] * ids.shape[1]
            mb = {k: self._put(_fit(v[idx], width) if v.ndim == 2 else v[idx])
                  for k, v in fields.items()}  # fmt: skip
            w = float(loss_mask[idx].sum())
            g, loss, metrics, mb_stats = grad_fn(self.params, ids, mask, {**mb, **counts},
                                                 self._bias(), w / max(n_tok, 1.0))  # fmt: skip
            grads = g if grads is None else tree_add(grads, g)
            if mb_stats is not None:  # [layers, E + 2]: loads, drops, aux loss
                mb_stats = np.asarray(mb_stats, np.float64)
                aux += float(mb_stats[:, -1].mean()) * w / max(n_tok, 1.0)
                stats = mb_stats if stats is None else stats + mb_stats
            add_metric(sums, "loss", float(loss), w)
            for key, val in metrics.items():
                # counts (num_tokens: this micro-batch's weight) are not averaged, as in torch
                if key != "loss" and not key.startswith("num_"):
                    add_metric(sums, key, float(val), w)
        lr = self.cfg.optimizer.lr * float(lr_factor(self._step, self.cfg.scheduler))
        self.params, self.opt_state, norm = self._update_fn(self.params, self.opt_state, grads)
        self._step += 1
        out = final_metrics(sums, n_tok)
        elapsed = time.perf_counter() - t0
        out.update(
            grad_norm=float(norm),
            lr=lr,
            num_loss_tokens=n_tok,
            num_sequences=n_seq,
            num_tokens=float(lengths.sum()),
            num_tokens_forwarded=float(forwarded),
            tokens_per_s=float(lengths.sum()) / max(elapsed, 1e-9),
            step_time_s=elapsed,
        )
        if stats is not None:
            out.update(self._end_moe_step(stats, aux, aux_coeff > 0))
        return out

    def _end_moe_step(self, stats: np.ndarray, aux: float, with_aux: bool) -> dict[str, float]:
        """The aux-loss-free bias update from the step's loads, and the router metrics the
        torch worker reports (``dockyard.torch.moe.step``)."""
        load, dropped = stats[:, :-2], float(stats[:, -2].sum())
        self._update_router_bias(load)
        out = router_metrics(load.tolist(), dropped)
        if with_aux:
            out["moe/aux_loss"] = aux
        if self.cfg.moe.router_enable_expert_bias and self.router_bias is not None:
            out["moe/expert_bias_absmean"] = float(np.abs(np.asarray(self.router_bias)).mean())
        return out

    # ------------------------------------------------------- weights and state
    def iter_weights(self, dtype: Any = None) -> Iterator[tuple[str, np.ndarray]]:
        """``(HF name, full array)`` one tensor at a time (gathered from its shards)."""
        return iter_hf_weights(self.model_cfg, self.params, dtype)

    def export_weights(self, bucket_bytes: int) -> Iterator[dict[str, np.ndarray]]:
        """Buckets of full tensors by HF name (float32), at most ``bucket_bytes`` each."""
        return bucketed(self.iter_weights(), bucket_bytes)

    def export_hf(self, path: str, dtype: Any = None) -> str:
        """Write a plain HF folder (``config.json`` + ``model.safetensors``)."""
        save_hf(self.model_cfg, self.params, path, dtype)
        return path

    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        ckpt.save_checkpoint(path, self.params, self.opt_state, self._step, extra_state,
                             self.cfg.model_name, tokenizer_name=self.cfg.tokenizer_name,
                             chat_template=self.cfg.chat_template,
                             router_bias=self.router_bias)  # fmt: skip

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        self.params, self.opt_state, self._step, extra = ckpt.load_checkpoint(
            path, self.params, self.opt_state
        )
        bias = ckpt.load_router_bias(path)
        if self.router_bias is not None and bias is not None:
            self.router_bias = jax.device_put(bias, shd.replicated(self.mesh))
        return extra


def _fit(a: np.ndarray, width: int) -> np.ndarray:
    """Trim or zero-pad axis 1 of ``a`` to ``width``."""
    if a.shape[1] >= width:
        return a[:, :width]
    pad = [(0, 0), (0, width - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
    return np.pad(a, pad)


def _unconstrained(batch: Batch) -> None:
    if batch.allowed is not None:
        raise ValueError(
            "this batch was generated under a grammar (policy.generation.tool_call_grammar); "
            "the JAX trainer does not take logprobs over allowed-token sets: use the torch "
            "trainer"
        )


def _batch_fields(batch: Batch) -> dict[str, np.ndarray]:
    """The arrays the loss sees (``[B, T]`` per token or ``[B]`` per sequence), float32."""
    _unconstrained(batch)
    out: dict[str, np.ndarray] = {}
    for name in _TOKEN_FIELDS:
        value = getattr(batch, name)
        if value is not None:
            out[name] = np.asarray(value)
    out.update({k: np.asarray(v) for k, v in batch.extras.items()})
    return {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in out.items()}
