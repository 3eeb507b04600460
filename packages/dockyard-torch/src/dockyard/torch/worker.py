"""The torch policy worker: one rank of an FSDP2 (+ tensor-parallel) HF causal LM, or a single
process.

The ranks form a ``(dp, tp)`` mesh (:mod:`dockyard.torch.parallel`). Data parallelism: every
rank is handed the same global :class:`Batch`; data-parallel row ``d`` works on sequences
``d::dp`` (the ``tp`` ranks of a row share them and split each layer). A train step is

    N_tok = Σ_dp Σ_b,t loss_mask,   N_seq = Σ_dp #{b : Σ_t loss_mask_bt > 0}
    for each micro-batch μ of this row:  (L_μ · dp).backward()
    clip ‖g‖ to max_grad_norm;  AdamW step;  scheduler step

where ``L_μ = loss_fn(logprobs_μ, {fields of μ, num_loss_tokens=N_tok, num_sequences=N_seq})`` is
normalised by the *global* counts, so Σ_μ L_μ over all rows is the loss of the whole batch and
the update does not depend on the micro-batch size or the number of ranks (FSDP averages
gradients over ``dp``; the ``dp`` factor turns that average into the sum). Rows with fewer
micro-batches run zero-weighted dummy ones so that the collectives stay in step. A loss with
``rows_per_group = k`` (a preference loss: k = 2) gets its rows by groups of k adjacent
sequences, each group whole in one micro-batch of one data-parallel row.

Usable under torchrun and as a Ray actor: construct it from a config dict (picklable), with
``rank``/``world_size`` (and ``MASTER_ADDR``/``MASTER_PORT`` in the environment) for several
ranks. Collective methods (everything but ``step``) must be called on all ranks.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dockyard.core.experience import AllowedTokens, Batch
from dockyard.core.interfaces.policy import LossFn, PolicyWorker, TrainMetrics
from dockyard.core.rl.metrics import add_metric, final_metrics, merge_metrics
from dockyard.torch import checkpoint as ckpt
from dockyard.torch.config import TorchPolicyConfig
from dockyard.torch.context_parallel import ATTENTION as CP_ATTENTION
from dockyard.torch.context_parallel import (
    CPChunk,
    check_context_parallel,
    gather_positions,
    next_token_logprobs,
    split_rows,
)
from dockyard.torch.export import bucketed, iter_hf_tensors
from dockyard.torch.logprobs import AllowedMasks, position_entropy, token_logprobs, unpack
from dockyard.torch.model import (
    compute_dtype,
    init_distributed,
    load_hf_model,
    shard_model,
    use_fsdp,
)
from dockyard.torch.moe import MoE, moe_blocks
from dockyard.torch.optim import build_optimizer
from dockyard.torch.packing import (
    PackedRow,
    dynamic_batches,
    ffd_pack,
    fixed_batches,
    pack_rows,
    sequence_lengths,
)
from dockyard.torch.parallel import clip_grad_norm_
from dockyard.torch.prefix import (
    MIN_SAVING,
    TreeRow,
    build_tree,
    gather_aligned,
    lex_order,
    sliding_window,
    tree_logprobs,
    tree_mask,
    tree_tokens,
)
from dockyard.torch.teachers import TeacherSet, build_teacher, load_tokenizer
from dockyard.torch.vision import ImageInputs, is_vision_language

_TOKEN_FIELDS = ("loss_mask", "advantages", "gen_logprobs", "prev_logprobs", "ref_logprobs")


class TorchPolicyWorker(PolicyWorker):
    """See the module docstring. ``config``: a :class:`TorchPolicyConfig` or a dict of one."""

    def __init__(
        self,
        config: TorchPolicyConfig | Mapping[str, Any],
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        cfg = config if isinstance(config, TorchPolicyConfig) else TorchPolicyConfig(**config)
        self.cfg = cfg
        self.dist = init_distributed(
            rank, world_size, cfg.tensor_parallel_size, cfg.fsdp.cpu_offload,
            cfg.context_parallel_size,
        )  # fmt: skip
        self.device = self.dist.device
        self.dtype = compute_dtype(cfg, self.device)
        self.fsdp = use_fsdp(cfg, self.dist)
        torch.manual_seed(cfg.seed)
        self.model = self._load_model(trainable=True)
        self._context_parallel(self.model, moe=bool(moe_blocks(self.model)))
        shard_model(self.model, self.dist, cfg, self.fsdp)
        self.moe = MoE.of(self.model, cfg.moe)  # None for a dense model
        # one ancestor mask cannot express a sliding window (Gemma 2/3, Mistral-style): such a
        # model's batches are laid out unshared, exactly as before (prefix.sliding_window)
        self._tree_exact = sliding_window(self.model.config) is None
        if cfg.shared_prefix and not self._tree_exact and self.dist.rank == 0:
            print(
                f"dockyard: shared-prefix training off for {cfg.model_name}: its sliding-window "
                "attention layers cannot share a prefix through one mask (computed unshared)",
                file=sys.stderr,
                flush=True,
            )
        self.reference = None
        if cfg.reference_policy and not cfg.lora.enabled:
            self.reference = self._load_model(trainable=False)
            self._context_parallel(self.reference, moe=False)
            shard_model(self.reference, self.dist, cfg, self.fsdp)
        self.teacher = None  # a distillation loss's frozen teacher (a causal LM)
        if cfg.teacher_model_name:
            teacher_cfg = cfg.model_copy(update={"model_name": cfg.teacher_model_name})
            self.teacher = load_hf_model(teacher_cfg, self.device, trainable=False)
            shard_model(self.teacher, self.dist, teacher_cfg, self.fsdp)
        self.teacher_set = self._load_teachers() if cfg.teachers else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer, self.scheduler = build_optimizer(params, cfg.optimizer, cfg.scheduler)
        self._step = 0
        self._vision = self._image_inputs()  # a vision-language policy's pixel values
        self._images: list[list[np.ndarray]] | None = None  # this batch's rows' images
        self._tree = False  # this batch's layout (:meth:`_layout`)
        self._allowed: AllowedTokens | None = None  # its grammar masks
        self._ids = np.zeros((0, 0), dtype=np.int64)

    def _load_model(self, trainable: bool) -> torch.nn.Module:
        """The HF model this worker trains (``trainable``) or keeps frozen (the reference): a
        causal LM here; a subclass with another head overrides it."""
        return load_hf_model(self.cfg, self.device, trainable=trainable)

    def _image_inputs(self) -> ImageInputs | None:
        config = self.model.config
        if not is_vision_language(config):
            return None
        if self.dist.world_size > 1:
            raise ValueError(
                f"{self.cfg.model_name} is a vision-language model: it trains on one rank for "
                "now (its vision tower runs only in micro-batches with images, which would put "
                "the ranks' FSDP collectives out of step): set the trainer's world size to 1"
            )
        return ImageInputs(self.cfg.model_name, config)

    def _load_teachers(self) -> Any:
        """``cfg.teachers``, frozen and sharded like the student (:mod:`dockyard.torch.teachers`)."""
        cfg = self.cfg
        student_tok = load_tokenizer(cfg.tokenizer_name or cfg.model_name)
        loaded = []
        for spec in cfg.teachers or []:
            tcfg = cfg.model_copy(update={"model_name": spec["model_name"]})
            model = load_hf_model(tcfg, self.device, trainable=False)
            shard_model(model, self.dist, tcfg, self.fsdp)
            loaded.append(build_teacher(model, spec["model_name"], spec["weight"], student_tok))
        return TeacherSet(loaded, student_tok, cfg.teacher_combination)

    def _context_parallel(self, model: torch.nn.Module, moe: bool) -> None:
        """With ``context_parallel_size > 1``: refuse what it cannot run (naming the fix) and
        switch ``model``'s attention to the all-gather one (:mod:`.context_parallel`)."""
        cfg, cp = self.cfg, self.dist.cp_size
        if cp == 1:
            return
        hf = model.get_base_model() if hasattr(model, "get_base_model") else model
        check_context_parallel(
            hf.config, cp, tp=self.dist.tp_size, moe=moe, packing=cfg.sequence_packing.enabled
        )
        if cfg.teacher_model_name or cfg.teachers:
            raise ValueError(
                f"context_parallel_size={cp} with a distillation teacher is not supported (the "
                "teachers score whole rows): set context_parallel_size=1"
            )
        hf.set_attn_implementation(CP_ATTENTION)

    # ----------------------------------------------------------------- helpers
    @property
    def step(self) -> int:
        return self._step

    @property
    def rank(self) -> int:
        return self.dist.rank

    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _shard(self, n: int, group: int = 1) -> list[int]:
        """This data-parallel row's sequences ``dp_rank::dp_size``, by groups of ``group``
        adjacent rows (a loss's ``rows_per_group``)."""
        if n % group:
            raise ValueError(f"the loss takes rows in groups of {group}; the batch has {n} rows")
        groups = range(self.dist.dp_rank, n // group, self.dist.dp_size)
        return [g * group + j for g in groups for j in range(group)]

    def _rows(self, ids: np.ndarray, lengths: np.ndarray, group: int = 1) -> list[int]:
        """This data-parallel row's sequences. With ``shared_prefix`` and several rows: whole
        runs of the groups sorted by their tokens (a prompt's samples stay on one rank, where
        they share it), an equal number of groups per row; else :meth:`_shard`."""
        mine = self._shard(ids.shape[0], group)
        if not self.cfg.shared_prefix or self.dist.dp_size == 1:
            return mine
        order = lex_order(ids, lengths, list(range(0, ids.shape[0], group)))
        part = np.array_split(np.asarray(order, dtype=np.int64), self.dist.dp_size)
        return [int(g) + j for g in part[self.dist.dp_rank] for j in range(group)]

    @property
    def _counts_here(self) -> bool:
        """Whether this rank's per-row sums count in all-reduces (one rank per tp group and
        per context-parallel group: their ranks hold the same rows)."""
        return self.dist.tp_rank == 0 and self.dist.cp_rank == 0

    def _plan(
        self, lengths: np.ndarray, indices: list[int], train: bool, group: int = 1
    ) -> list[list[int]]:
        """Micro-batches (lists of global sequence indices) for this rank's ``indices``; each
        run of ``group`` of them stays whole, in order (a pair of a preference loss): packing
        counts a group's total length, dynamic batching its longest row ``group`` times, a fixed
        size rounds down to whole groups (at least one)."""
        cfg = self.cfg
        units = [indices[j : j + group] for j in range(0, len(indices), group)]
        if self._tree:
            return self._plan_tree(lengths, units, train)
        if cfg.sequence_packing.enabled:
            sp = cfg.sequence_packing
            total = [int(lengths[u].sum()) for u in units]
            plan = ffd_pack(total, sp.train_mb_tokens if train else sp.logprob_mb_tokens)
        elif cfg.dynamic_batching.enabled:
            db = cfg.dynamic_batching
            budget = db.train_mb_tokens if train else db.logprob_mb_tokens
            plan = dynamic_batches([int(lengths[u].max()) for u in units], budget // group)
        else:
            size = cfg.train_micro_batch_size if train else cfg.logprob_batch_size
            plan = fixed_batches(len(units), max(size // group, 1))
        return [[i for j in mb for i in units[j]] for mb in plan]

    def _plan_tree(
        self, lengths: np.ndarray, units: list[list[int]], train: bool
    ) -> list[list[int]]:
        """Shared-prefix micro-batches: ``units`` in lexicographic order of their first row (a
        group's sequences adjacent), cut after ``train_micro_batch_size`` (``logprob_batch_size``)
        sequences, or with packing / dynamic batching when the next unit would take the tree
        past the token budget (a unit alone may exceed it). Each becomes one tree row."""
        cfg, ids = self.cfg, self._ids
        order = lex_order(ids, lengths, [u[0] for u in units])
        by_first = {u[0]: u for u in units}
        budget = size = None
        if cfg.sequence_packing.enabled or cfg.dynamic_batching.enabled:
            tb = cfg.sequence_packing if cfg.sequence_packing.enabled else cfg.dynamic_batching
            budget = tb.train_mb_tokens if train else tb.logprob_mb_tokens
        else:
            size = cfg.train_micro_batch_size if train else cfg.logprob_batch_size
        plan: list[list[int]] = []
        current: list[int] = []
        for first in order:
            unit = by_first[first]
            if current and (
                (size is not None and len(current) + len(unit) > size)
                or (budget is not None and tree_tokens(ids, lengths, current + unit) > budget)
            ):
                plan.append(current)
                current = []
            current = current + unit
        if current:
            plan.append(current)
        return plan

    def _use_tree(self, ids: np.ndarray, lengths: np.ndarray, rows: list[int]) -> bool:
        """Whether this batch is laid out as prefix trees (:mod:`dockyard.torch.prefix`): with
        ``shared_prefix`` on, an attention that takes a custom mask, no sliding window, and at least
        ``MIN_SAVING`` of this rank's tokens shared."""
        if not self.cfg.shared_prefix or self.cfg.attn_implementation not in ("sdpa", "eager"):
            return False
        if self.dist.cp_size > 1:  # a tree is one row: its mask is not split by position
            return False
        if not self._tree_exact:
            return False
        total = int(lengths[rows].sum())
        return total > 0 and tree_tokens(ids, lengths, rows) <= (1 - MIN_SAVING) * total

    def _layout(
        self,
        ids: np.ndarray,
        lengths: np.ndarray,
        rows: list[int],
        allowed: AllowedTokens | None = None,
        images: list[list[np.ndarray]] | None = None,
    ) -> None:
        """Choose this batch's layout (trees or not) before planning its micro-batches;
        ``allowed``: the batch's grammar masks (any layout but context parallelism);
        ``images``: its rows' images (padded rows, whatever the packing)."""
        self._ids = ids
        self._allowed = allowed
        if images is not None and self._vision is None:
            raise ValueError(
                f"this batch has images but {self.cfg.model_name} is a text model: train a "
                "vision-language model (e.g. a Qwen2-VL) on image-bearing trajectories"
            )
        self._images = images
        if allowed is not None and self.dist.cp_size > 1:
            raise ValueError(
                "this batch was generated under a grammar (policy.generation.tool_call_grammar) "
                "and its allowed-token masks follow whole rows: set context_parallel_size to 1"
            )
        self._tree = images is None and self._use_tree(ids, lengths, rows)

    def _num_microbatches(self, plan: list[list[int]]) -> int:
        n = torch.tensor([len(plan)], dtype=torch.int64, device=self.device)
        if dist.is_initialized():
            dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return int(n.item())

    def _forward(
        self, model: torch.nn.Module, ids: np.ndarray, lengths: np.ndarray, idx: list[int]
    ) -> tuple[torch.Tensor, int, Any]:
        """Logits of micro-batch ``idx``: ``([b|1, T_mb|N, V], T_mb, (layout, input_ids))``; the
        layout is a packed row, a tree row (shared prefixes) or None (padded)."""
        width = int(lengths[idx].max())
        with self._autocast():
            if self._images is not None:  # padded rows, their images' pixel values beside
                input_ids = torch.as_tensor(ids[idx, :width], device=self.device)
                images = [im for i in idx for im in self._images[i]]
                assert self._vision is not None
                kw = self._vision.kwargs(input_ids, images, self.device)
                out = model(input_ids=input_ids, attention_mask=self._pad_mask(lengths, idx, width),
                            use_cache=False, **kw)  # fmt: skip
                return out.logits, width, (None, input_ids)
            if self._tree:
                tree = build_tree(ids, lengths, idx)
                input_ids = torch.as_tensor(tree.input_ids, device=self.device)[None]
                position_ids = torch.as_tensor(tree.position_ids, device=self.device)[None]
                eager = self.cfg.attn_implementation == "eager"
                mask = tree_mask(tree, self.device, self.dtype if eager else None)
                out = model(input_ids=input_ids, position_ids=position_ids,
                            attention_mask=mask, use_cache=False)  # fmt: skip
                return out.logits, width, (tree, input_ids)
            if self.cfg.sequence_packing.enabled:
                row = pack_rows(ids, lengths, idx)
                input_ids = torch.as_tensor(row.input_ids, device=self.device)[None]
                position_ids = torch.as_tensor(row.position_ids, device=self.device)[None]
                out = model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
                return out.logits, width, (row, input_ids)
            input_ids = torch.as_tensor(ids[idx, :width], device=self.device)
            if self.dist.cp_size > 1:  # this rank's positions of every row
                chunk = split_rows(input_ids, self.dist.mesh.cp_group)
                out = model(input_ids=chunk.local_ids(), position_ids=chunk.position_ids(),
                            use_cache=False, cp_chunk=chunk)  # fmt: skip
                return out.logits, width, (chunk, chunk.input_ids)
            mask = self._pad_mask(lengths, idx, width)
            out = model(input_ids=input_ids, attention_mask=mask, use_cache=False)
            return out.logits, width, (None, input_ids)

    def _pad_mask(self, lengths: np.ndarray, idx: list[int], width: int) -> torch.Tensor:
        cols = torch.arange(width, device=self.device)
        lens = torch.as_tensor(lengths[idx], device=self.device)
        return (cols[None, :] < lens[:, None]).long()

    def _mb_logprobs(self, model, ids, lengths, idx) -> torch.Tensor:
        """``[b, T_mb]`` logprobs of micro-batch ``idx``, 0 at t = 0 and on padding."""
        return self._logprobs_of(self._forward(model, ids, lengths, idx), lengths, idx)

    def _logprobs_of(
        self, fwd: tuple[torch.Tensor, int, Any], lengths: np.ndarray, idx: list[int]
    ) -> torch.Tensor:
        """``[b, T_mb]`` logprobs of micro-batch ``idx`` from :meth:`_forward`'s output; over
        each token's allowed set where the batch was generated under a grammar."""
        logits, width, (row, input_ids) = fwd
        lens = lengths[idx]
        tau = self.cfg.generation_temperature
        masks = self._masks(idx, width, row, logits.shape[-1])
        if isinstance(row, TreeRow):
            return tree_logprobs(logits[0], row, width, tau, masks)
        if isinstance(row, CPChunk):
            return next_token_logprobs(logits, row, tau) * self._valid(width, lens)
        if row is not None:
            return unpack(token_logprobs(logits, input_ids, tau, masks)[0], row, width)
        return token_logprobs(logits, input_ids, tau, masks) * self._valid(width, lens)

    def _masks(self, idx: list[int], width: int, row: Any, vocab: int) -> AllowedMasks | None:
        """Micro-batch ``idx``'s grammar masks laid out like its tokens (None: unconstrained):
        rows ``[b, width]`` (padded, a tree's sequences) or ``[1, N]`` (packed; a sequence's
        first token, scored by the previous sequence's logits and dropped, unconstrained). Only
        the sets the micro-batch uses go to the device."""
        if self._allowed is None:
            return None
        rows = np.asarray(self._allowed.rows)[idx, :width]
        if isinstance(row, PackedRow):
            parts = [r[:n].copy() for r, n in zip(rows, row.lengths, strict=True)]
            for part in parts:
                part[:1] = -1
            rows = np.concatenate(parts)[None]
        used = np.unique(rows[rows >= 0])
        if used.size == 0:
            return None
        rows = np.where(rows >= 0, np.searchsorted(used, rows), -1)
        return AllowedMasks(np.asarray(self._allowed.table)[used], rows, vocab, self.device)

    def _valid(self, width: int, lens: np.ndarray) -> torch.Tensor:
        """``[b, width]`` 1.0 on each row's tokens, 0.0 on its padding."""
        cols = torch.arange(width, device=self.device)
        return (cols[None, :] < torch.as_tensor(lens, device=self.device)[:, None]).float()

    def _per_token(self, x: torch.Tensor, row: Any, width: int, lens: np.ndarray) -> torch.Tensor:
        """Per-position values ``[b|1, T_mb|N, ...]`` of :meth:`_forward`'s logits, already
        shifted (position t describes token t), as ``[b, T_mb, ...]``: unpacked from a packed
        row, 0 at t = 0 and on padding."""
        if row is not None:
            return unpack(x[0], row, width)
        keep = self._valid(width, lens).to(x.dtype)
        return x * keep.view(*keep.shape, *([1] * (x.dim() - 2)))

    def _next_token(self, x: torch.Tensor, row: Any, width: int, lens: np.ndarray) -> torch.Tensor:
        """Per-position values ``[b|1, T_mb|N, ...]`` describing the *next* token (logits, their
        top-k) as ``[b, T_mb, ...]`` aligned like the logprobs (position t: token t)."""
        if isinstance(row, TreeRow):
            return gather_aligned(x[0], row, width)
        if isinstance(row, CPChunk):  # the whole rows from the group's chunks
            x, row = gather_positions(x, row), None
        pad = (0, 0) * (x.dim() - 2) + (1, 0)
        return self._per_token(torch.nn.functional.pad(x[:, :-1], pad), row, width, lens)

    def _aligned_logits(self, fwd: tuple[torch.Tensor, int, Any], lens: np.ndarray):
        """``[b, T_mb, V] float32`` logits aligned like the logprobs (position t: the
        distribution of token t; 0 at t = 0 and on padding), differentiable; unscaled."""
        logits, width, (row, _) = fwd
        return self._next_token(logits.float(), row, width, lens)

    def _mb_topk(self, model, ids, lengths, idx, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``model``'s top-k logits of micro-batch ``idx`` (no gradient): ``(values [b, T_mb,
        k] float32, indices [b, T_mb, k] int64)``, aligned like the logprobs, 0 on padding."""
        with torch.no_grad():
            logits, width, (row, _) = self._forward(model, ids, lengths, idx)
            v, j = torch.topk(logits.float(), k, dim=-1)
            lens = lengths[idx]
            return self._next_token(v, row, width, lens), self._next_token(j, row, width, lens)

    def _dummy_pass(self, train: bool, teacher: bool = False) -> None:
        """A zero-weighted forward (then, with ``train``, backward) that keeps FSDP collectives
        in step; with ``teacher``, the teacher's forward between them, as in a real
        micro-batch of a distillation loss."""
        ids = torch.zeros((1, 2), dtype=torch.int64, device=self.device)
        with self._autocast(), torch.set_grad_enabled(train):
            logits = self.model(input_ids=ids, use_cache=False).logits
        if teacher:
            extra = [t.model for t in self.teacher_set.teachers] if self.teacher_set else []
            for model in [self.teacher, *extra]:
                if model is not None:
                    with self._autocast(), torch.no_grad():
                        model(input_ids=ids, use_cache=False)
        if train:
            if self.moe is not None:
                self.moe.aux_term(0.0)  # the dummy's routing counts for nothing
            (logits.float().sum() * 0.0).backward()

    def _gather_rows(self, out: np.ndarray) -> np.ndarray:
        """Fill rows owned by other ranks (each rank computed ``rank::world_size``)."""
        if not dist.is_initialized() or self.dist.world_size == 1:
            return out
        t = torch.as_tensor(out, device=self.device)
        if not self._counts_here:
            t.zero_()  # the tp group's ranks computed the same rows
        dist.all_reduce(t)  # rows are disjoint and zero elsewhere
        return t.cpu().numpy()

    def _logprobs(self, model: torch.nn.Module, batch: Batch) -> np.ndarray:
        ids = np.asarray(batch.input_ids, dtype=np.int64)
        lengths = sequence_lengths(batch.attention_mask)
        B, T = ids.shape
        out = np.zeros((B, T), dtype=np.float32)
        mine = self._rows(ids, lengths)
        self._layout(ids, lengths, mine, batch.allowed, batch.images)
        plan = self._plan(lengths, mine, train=False)
        n_mb = self._num_microbatches(plan)
        model.eval()
        with torch.no_grad():
            for i in range(n_mb):
                if i >= len(plan):
                    model(input_ids=torch.zeros((1, 2), dtype=torch.int64, device=self.device))
                    continue
                lp = self._mb_logprobs(model, ids, lengths, plan[i])
                out[plan[i], : lp.shape[1]] = lp.float().cpu().numpy()
        return self._gather_rows(out)

    # -------------------------------------------------------------- interface
    def get_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` logprobs of ``batch.input_ids`` (module docstring of logprobs)."""
        return self._logprobs(self.model, batch)

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        """Logprobs under the frozen reference: the LoRA base (adapters off) or a copy."""
        if self.cfg.lora.enabled:
            with self.model.disable_adapter():
                return self._logprobs(self.model, batch)
        if self.reference is None:
            raise RuntimeError(
                "no reference policy: this worker was built with reference_policy=false"
            )
        return self._logprobs(self.reference, batch)

    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(values [B, T, k], indices [B, T, k])``, aligned like logprobs, 0 on padding."""
        values, indices = self._per_token_pass(
            batch,
            lambda ids, lengths, idx: self._mb_topk(self.model, ids, lengths, idx, k),
            [((k,), np.float32), ((k,), np.int64)],
        )
        return values, indices

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32``: the entropy (nats) of the distribution each token was drawn
        from, temperature-scaled as in generation, aligned like the logprobs (0 at t = 0 and
        on padding)."""
        tau = self.cfg.generation_temperature

        def entropy(ids: np.ndarray, lengths: np.ndarray, idx: list[int]) -> tuple[torch.Tensor]:
            logits, width, (row, _) = self._forward(self.model, ids, lengths, idx)
            return (self._next_token(position_entropy(logits, tau), row, width, lengths[idx]),)

        (out,) = self._per_token_pass(batch, entropy, [((), np.float32)])
        return out

    def _per_token_pass(self, batch: Batch, fn, outputs) -> list[np.ndarray]:
        """Run ``fn(ids, lengths, idx) -> tensors [b, T_mb, *shape]`` over this rank's
        micro-batches of ``batch`` (no gradient, eval mode) and return one ``[B, T, *shape]``
        array per ``(shape, dtype)`` of ``outputs``, every rank's rows gathered, 0 elsewhere."""
        ids = np.asarray(batch.input_ids, dtype=np.int64)
        lengths = sequence_lengths(batch.attention_mask)
        B, T = ids.shape
        out = [np.zeros((B, T, *shape), dtype=dtype) for shape, dtype in outputs]
        mine = self._rows(ids, lengths)
        self._layout(ids, lengths, mine, images=batch.images)
        plan = self._plan(lengths, mine, train=False)
        n_mb = self._num_microbatches(plan)
        self.model.eval()
        with torch.no_grad():
            for i in range(n_mb):
                if i >= len(plan):  # the collectives of a real micro-batch, in the same order
                    self.model(input_ids=torch.zeros((1, 2), dtype=torch.int64, device=self.device))
                    continue
                idx = plan[i]
                for arr, t in zip(out, fn(ids, lengths, idx), strict=True):
                    arr[idx, : t.shape[1]] = t.cpu().numpy()
        return [self._gather_rows(arr) for arr in out]

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """One optimizer step over ``batch``.

        Metrics: ``loss`` (the whole batch's), the loss's own metrics as loss-token-weighted
        means over micro-batches and ranks, ``grad_norm`` (before clipping), ``lr`` (the one this
        step used), ``num_loss_tokens``, ``num_sequences``, ``num_tokens`` (real), ``num_tokens_forwarded`` (what the
        forwards processed: padding included, a prefix tree once), ``tokens_per_s``,
        ``step_time_s``.

        A loss with ``teacher_topk = k`` (a distillation loss) also gets, per micro-batch,
        ``student_logits [b, T_mb, V]`` (differentiable, aligned like the logprobs) and the
        frozen teacher's ``teacher_topk_logits`` / ``teacher_topk_indices [b, T_mb, k]`` on the
        same tokens: computed here, micro-batch by micro-batch (nothing ``[B, T, V]`` leaves
        the rank); with ``teachers`` (several, any tokenizer) the combined target's top-k and
        ``teacher_mask [b, T_mb]``. A loss with ``teacher_logprobs = N`` (the OPD advantage's)
        gets ``teacher_logprobs`` / ``teacher_logprob_mask [N, b, T_mb]``
        (:mod:`dockyard.torch.teachers`).
        """
        t0 = time.perf_counter()
        self.model.train()
        sums, n_tok, n_seq, n_all, n_fwd = self._loss_pass(batch, loss_fn, train=True)
        lr = float(self.optimizer.param_groups[0]["lr"])
        grad_norm = self._clip_and_step()
        metrics_out = self._reduce_metrics(sums, n_tok)
        if self.moe is not None:  # router metrics; the aux-loss-free bias update (collective)
            metrics_out.update(self.moe.end_step())
        metrics_out.update(
            grad_norm=grad_norm,
            lr=lr,
            num_loss_tokens=n_tok,
            num_sequences=n_seq,
            num_tokens=n_all,
            num_tokens_forwarded=n_fwd,
            tokens_per_s=n_all / max(time.perf_counter() - t0, 1e-9),
            step_time_s=time.perf_counter() - t0,
        )
        return metrics_out

    def loss_metrics(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """The metrics :meth:`train_step` would report for ``batch`` (``loss`` and the loss's
        own, ``num_loss_tokens``, ``num_sequences``) without a gradient or a step: a held-out
        evaluation (the distillation driver's held-out KL)."""
        self.model.eval()
        with torch.no_grad():
            sums, n_tok, n_seq, *_ = self._loss_pass(batch, loss_fn, train=False)
        out = self._reduce_metrics(sums, n_tok)
        out.update(num_loss_tokens=n_tok, num_sequences=n_seq)
        return out

    def _loss_pass(
        self, batch: Batch, loss_fn: LossFn, train: bool
    ) -> tuple[dict[str, float], float, float, float, float]:
        """The loss over this rank's micro-batches (backward with ``train``): the metric sums
        and the global loss-token, sequence and token counts, and the tokens the forwards
        processed (padding included; a prefix tree's nodes), summed over data-parallel rows."""
        ids = np.asarray(batch.input_ids, dtype=np.int64)
        lengths = sequence_lengths(batch.attention_mask)
        group = int(getattr(loss_fn, "rows_per_group", 1))  # rows the loss takes together
        topk = int(getattr(loss_fn, "teacher_topk", 0) or 0)  # a distillation loss's k
        n_lp = int(getattr(loss_fn, "teacher_logprobs", 0) or 0)  # an OPD loss's teachers
        if topk and self.teacher is None and self.teacher_set is None:
            raise RuntimeError(
                "this loss distils from a teacher, but the worker has none: set "
                "teacher_model_name or teachers (core: loss_fn.teacher_model_name / "
                "loss_fn.teachers)"
            )
        if n_lp and (self.teacher_set is None or len(self.teacher_set.teachers) != n_lp):
            have = 0 if self.teacher_set is None else len(self.teacher_set.teachers)
            raise RuntimeError(
                f"this loss (the OPD advantage) needs {n_lp} teachers' log-probabilities, but "
                f"the worker has {have}: set teachers (core: grpo.adv_estimator.teachers)"
            )
        mine = self._rows(ids, lengths, group)
        loss_mask = np.asarray(batch.loss_mask, dtype=bool)
        counts = torch.tensor(
            [loss_mask[mine].sum(), (loss_mask[mine].sum(axis=1) > 0).sum(), lengths[mine].sum()],
            dtype=torch.float64,
            device=self.device,
        )
        if dist.is_initialized():
            if not self._counts_here:
                counts.zero_()
            dist.all_reduce(counts)
        n_tok, n_seq, n_all = (float(c) for c in counts.tolist())
        self._layout(ids, lengths, mine, batch.allowed, batch.images)
        plan = self._plan(lengths, mine, train=train, group=group)
        n_mb = self._num_microbatches(plan)
        # FSDP2 averages over its ranks; the loss is a share of the global one: scale back up
        scale = float(self.dist.dp_size * self.dist.cp_size) if self.fsdp else 1.0
        fields = _batch_fields(batch)
        sums: dict[str, float] = {}
        forwarded = 0
        for i in range(n_mb):
            if i >= len(plan):  # the collectives of a real micro-batch, in the same order
                self._dummy_pass(train, teacher=bool(topk or n_lp))
                continue
            idx = plan[i]
            fwd = self._forward(self.model, ids, lengths, idx)
            forwarded += fwd[0].shape[0] * fwd[0].shape[1] * self.dist.cp_size
            lp = self._logprobs_of(fwd, lengths, idx)
            width = lp.shape[1]
            mb = {
                k: self._tensor(v[idx][:, :width] if v.ndim == 2 else v[idx])
                for k, v in fields.items()
            }
            mb["num_loss_tokens"] = torch.tensor(n_tok, device=self.device)
            mb["num_sequences"] = torch.tensor(n_seq, device=self.device)
            if topk:
                mb["student_logits"] = self._aligned_logits(fwd, lengths[idx])
            if (topk or n_lp) and self.teacher_set is not None:
                mb.update(self._teacher_fields(ids, lengths, idx, loss_mask, fwd, topk, n_lp))
            elif topk:
                assert self.teacher is not None
                values, indices = self._mb_topk(self.teacher, ids, lengths, idx, topk)
                mb["teacher_topk_logits"], mb["teacher_topk_indices"] = values, indices
            del fwd
            loss, metrics = loss_fn(lp, mb)
            w = float(loss_mask[idx].sum())
            if train:
                aux = self.moe.aux_term(w / max(n_tok, 1.0)) if self.moe is not None else 0.0
                ((loss + aux) * scale).backward()
            add_metric(sums, "loss", float(loss.detach()), w)
            for key, val in metrics.items():
                if key != "loss" and not key.startswith("num_") and _is_scalar(val):
                    add_metric(sums, key, float(val), w)
        return sums, n_tok, n_seq, n_all, self._sum_over_rows(forwarded)

    def _sum_over_rows(self, x: float) -> float:
        """``x`` summed over the data-parallel rows (a tp group counts once)."""
        if not dist.is_initialized() or self.dist.world_size == 1:
            return float(x)
        t = torch.tensor([float(x) if self._counts_here else 0.0], device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def _teacher_fields(
        self, ids: np.ndarray, lengths: np.ndarray, idx: list[int], loss_mask: np.ndarray,
        fwd: tuple[torch.Tensor, int, Any], topk: int, n_lp: int,
    ) -> dict[str, torch.Tensor]:  # fmt: skip
        """What the teacher set gives micro-batch ``idx``: a distillation loss's combined
        ``teacher_topk_logits`` / ``teacher_topk_indices [b, T, k]`` and ``teacher_mask [b, T]``
        (where a teacher is aligned); an OPD loss's ``teacher_logprobs`` and
        ``teacher_logprob_mask [N, b, T]``."""
        ts = self.teacher_set
        assert ts is not None
        vocab = int(fwd[0].shape[-1])

        def same_vocab_logits(model: torch.nn.Module) -> torch.Tensor:
            with self._autocast():
                return self._aligned_logits(self._forward(model, ids, lengths, idx), lengths[idx])

        probs, aligned, scores, tokens = ts.views(
            same_vocab_logits, ids, lengths, idx, loss_mask, vocab, self.device
        )
        out: dict[str, torch.Tensor] = {}
        if topk:
            v, j, on = ts.combined_topk(probs, aligned, scores, topk)
            out.update(teacher_topk_logits=v, teacher_topk_indices=j, teacher_mask=on)
        if n_lp:
            out["teacher_logprobs"] = torch.stack([lp for lp, _ in tokens])
            out["teacher_logprob_mask"] = torch.stack([on for _, on in tokens])
        return out

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        t = torch.as_tensor(a, device=self.device)
        return t.float() if t.dtype == torch.float64 else t

    def _clip_and_step(self) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else float("inf")
        norm = clip_grad_norm_(params, max_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._step += 1
        return float(norm)

    def _reduce_metrics(self, sums: dict[str, float], n_tok: float) -> dict[str, float]:
        if dist.is_initialized() and self.dist.world_size > 1:
            gathered: list[dict[str, float]] = [{} for _ in range(self.dist.world_size)]
            dist.all_gather_object(gathered, sums if self._counts_here else {})
        else:
            gathered = [sums]
        return final_metrics(merge_metrics(gathered), n_tok)

    # ------------------------------------------------------- weights and state
    def export_weights(
        self, bucket_bytes: int, mode: str | None = None, *, copy: bool = True
    ) -> Iterator[dict[str, np.ndarray]]:
        """Buckets of full tensors by HF name (collective: iterate on every rank).

        ``mode`` (LoRA only): ``"merged"`` or ``"adapters"``; default ``lora.export``.
        ``copy=False``: arrays may view the live parameters (on the CPU), valid until the next
        optimizer step: for a weight sender, which copies every bucket before it returns.
        """
        mode = mode or self.cfg.lora.export
        return bucketed(iter_hf_tensors(self.model, mode, copy=copy), bucket_bytes)

    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        ckpt.save_checkpoint(
            path,
            self.model,
            self.optimizer,
            self.scheduler,
            self._step,
            extra_state,
            tokenizer_source=self.cfg.tokenizer_name,
            chat_template=self.cfg.chat_template,
        )

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        self._step, extra = ckpt.load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        return extra

    def export_hf(self, path: str, bucket_bytes: int = 1 << 30) -> str:
        """Write a plain HF safetensors folder (merged LoRA) that transformers and vLLM load,
        with the tokenizer training used (``tokenizer_name``, ``chat_template``)."""
        hf = self.model.get_base_model() if self.cfg.lora.enabled else self.model
        buckets = bucketed(iter_hf_tensors(self.model, "merged"), bucket_bytes)
        folder = ckpt.write_hf_folder(path, buckets, hf.config, self.cfg.model_name,
                                      self.cfg.tokenizer_name, self.cfg.chat_template)  # fmt: skip
        return str(folder)


def _batch_fields(batch: Batch) -> dict[str, np.ndarray]:
    """The arrays the loss sees (``[B, T]`` per token or ``[B]`` per sequence)."""
    out: dict[str, np.ndarray] = {}
    for name in _TOKEN_FIELDS:
        value = getattr(batch, name)
        if value is not None:
            out[name] = np.asarray(value)
    out.update({k: np.asarray(v) for k, v in batch.extras.items()})
    return out


def _is_scalar(v: Any) -> bool:
    return isinstance(v, float | int) or (isinstance(v, torch.Tensor) and v.numel() == 1)
