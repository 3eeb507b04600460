"""The torch reward-model worker: a scalar head on an HF decoder, one rank of FSDP2 or a single
process, trained on (chosen, rejected) pairs.

The model is Hugging Face's own ``AutoModelForSequenceClassification`` with ``num_labels = 1``
(its ``score`` head new and random on a causal-LM folder), so the folder :meth:`export_hf`
writes loads in transformers and TRL as a reward model. A row's score r is the head's output
at its last token that is not padding (what the HF class pools): padding is written as the
model's ``pad_token_id`` (set from the tokenizer when the folder names none), so a row's score
does not depend on how much padding its batch has.

Everything but the head is :class:`~dockyard.torch.worker.TorchPolicyWorker`'s: the ``(dp, tp)``
mesh, FSDP2, LoRA (task type ``SEQ_CLS``: the adapters and the whole head train), micro-batches
(fixed size or dynamic batching), the optimizer. A train step over B rows is

    for each micro-batch μ of this data-parallel row:   (L_μ · dp).backward()
    clip ‖g‖ to max_grad_norm;  AdamW step;  scheduler step

with ``L_μ = loss_fn(r_μ [b], {margin, num_sequences = B})`` (a
:class:`~dockyard.core.rl.BradleyTerryPairsLoss`: pair i at rows 2i, 2i + 1, kept whole by
``rows_per_group = 2``; each L_μ is its share of the step's mean). Sequence packing is refused:
a packed row would need the head pooled per segment, which the HF class does not do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from dockyard.core.experience import Batch
from dockyard.core.interfaces.policy import TrainMetrics
from dockyard.core.rl.metrics import add_metric
from dockyard.torch.config import TorchPolicyConfig
from dockyard.torch.model import load_hf_model
from dockyard.torch.packing import sequence_lengths
from dockyard.torch.worker import TorchPolicyWorker, _is_scalar


class TorchRewardWorker(TorchPolicyWorker):
    """A reward model (module docstring). ``config``: a :class:`TorchPolicyConfig` or a dict of
    one; ``reference_policy`` is ignored (a reward model keeps no reference) and
    ``sequence_packing.enabled`` refused. Collective methods must run on every rank.
    ``export_hf(path)`` (the base class's) writes a Hugging Face sequence-classification folder
    (merged LoRA, the head as ``score.weight``, the tokenizer training used) that
    ``AutoModelForSequenceClassification.from_pretrained`` loads and that scores as this
    worker does."""

    def __init__(
        self,
        config: TorchPolicyConfig | Mapping[str, Any],
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        cfg = config if isinstance(config, TorchPolicyConfig) else TorchPolicyConfig(**config)
        if cfg.sequence_packing.enabled:
            raise ValueError(
                "the reward-model worker trains padded batches: sequence_packing.enabled "
                "(policy.sequence_packing.enabled) is not supported; use dynamic_batching "
                "for token-budgeted micro-batches"
            )
        if cfg.context_parallel_size > 1:
            raise ValueError(
                f"the reward-model worker scores whole rows (its head reads each row's last "
                f"token): context_parallel_size={cfg.context_parallel_size} "
                "(policy.dtensor_cfg.context_parallel_size) is not supported; set it to 1"
            )
        super().__init__(cfg.model_copy(update={"reference_policy": False}), rank, world_size)

    def _load_model(self, trainable: bool) -> torch.nn.Module:
        return load_hf_model(self.cfg, self.device, trainable=trainable, num_labels=1)

    @property
    def _hf(self) -> Any:
        return self.model.get_base_model() if self.cfg.lora.enabled else self.model

    # ----------------------------------------------------------------- forward
    def _mb_scores(self, ids: np.ndarray, lengths: np.ndarray, idx: list[int]) -> torch.Tensor:
        """``[b]`` scores of micro-batch ``idx`` (rows ``idx`` of ``ids``), padding rewritten as
        the pad token so that the head pools each row's last real token."""
        width = int(lengths[idx].max())
        input_ids = torch.as_tensor(ids[idx, :width], device=self.device)
        cols = torch.arange(width, device=self.device)
        real = cols[None, :] < torch.as_tensor(lengths[idx], device=self.device)[:, None]
        input_ids = torch.where(real, input_ids, int(self._hf.config.pad_token_id))
        with self._autocast():
            out = self.model(input_ids=input_ids, attention_mask=real.long(), use_cache=False)
        return out.logits[:, 0].float()

    def _dummy_forward(self) -> torch.Tensor:
        ids = torch.zeros((1, 2), dtype=torch.int64, device=self.device)
        with self._autocast():
            return self.model(input_ids=ids, use_cache=False).logits

    # -------------------------------------------------------------- interface
    def get_scores(self, batch: Batch) -> np.ndarray:
        """``[B] float32``: each row's score r (``batch.input_ids`` / ``attention_mask``)."""
        ids = np.asarray(batch.input_ids, dtype=np.int64)
        lengths = sequence_lengths(batch.attention_mask)
        out = np.zeros(ids.shape[0], dtype=np.float32)
        plan = self._plan(lengths, self._shard(ids.shape[0]), train=False)
        n_mb = self._num_microbatches(plan)
        self.model.eval()
        with torch.no_grad():
            for i in range(n_mb):
                if i >= len(plan):
                    self._dummy_forward()
                    continue
                out[plan[i]] = self._mb_scores(ids, lengths, plan[i]).cpu().numpy()
        return self._gather_rows(out)

    def get_logprobs(self, batch: Batch) -> np.ndarray:
        raise NotImplementedError("a reward model has no token logprobs: use get_scores")

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        raise NotImplementedError("a reward model has no token logprobs: use get_scores")

    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("a reward model has no token logits: use get_scores")

    def train_step(self, batch: Batch, loss_fn: Any) -> TrainMetrics:
        """One optimizer step over ``batch``'s rows: ``loss_fn(scores [b], fields)`` per
        micro-batch (a :class:`~dockyard.core.rl.BradleyTerryPairsLoss`), the fields being the
        batch's per-row ``extras`` (``margin``) and ``num_sequences`` (the step's rows).

        Metrics: ``loss`` (the whole batch's), the loss's own as row-weighted means over
        micro-batches and ranks, ``grad_norm`` (before clipping), ``lr``, ``num_sequences``,
        ``tokens_per_s``, ``step_time_s``.
        """
        t0 = time.perf_counter()
        ids = np.asarray(batch.input_ids, dtype=np.int64)
        lengths = sequence_lengths(batch.attention_mask)
        n_rows = ids.shape[0]
        group = int(getattr(loss_fn, "rows_per_group", 1))
        plan = self._plan(lengths, self._shard(n_rows, group), train=True, group=group)
        n_mb = self._num_microbatches(plan)
        scale = float(self.dist.dp_size) if self.fsdp else 1.0
        extras = {k: np.asarray(v) for k, v in batch.extras.items() if np.ndim(v) == 1}
        sums: dict[str, float] = {}
        self.model.train()
        for i in range(n_mb):
            if i >= len(plan):
                (self._dummy_forward().float().sum() * 0.0).backward()
                continue
            idx = plan[i]
            mb: dict[str, Any] = {k: self._tensor(v[idx]) for k, v in extras.items()}
            mb["num_sequences"] = torch.tensor(float(n_rows), device=self.device)
            loss, metrics = loss_fn(self._mb_scores(ids, lengths, idx), mb)
            (loss * scale).backward()
            add_metric(sums, "loss", float(loss.detach()), len(idx))
            for key, val in metrics.items():
                if key != "loss" and not key.startswith("num_") and _is_scalar(val):
                    add_metric(sums, key, float(val), len(idx))
        lr = float(self.optimizer.param_groups[0]["lr"])
        grad_norm = self._clip_and_step()
        metrics_out = self._reduce_metrics(sums, float(n_rows))
        metrics_out.update(
            grad_norm=grad_norm,
            lr=lr,
            num_sequences=float(n_rows),
            tokens_per_s=float(lengths.sum()) / max(time.perf_counter() - t0, 1e-9),
            step_time_s=time.perf_counter() - t0,
        )
        return metrics_out
