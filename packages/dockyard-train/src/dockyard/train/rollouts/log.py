"""The rollout log writer: each step's trajectories as one Parquet file in ``LOG_DIR/rollouts/``.

Layout: ``rollouts/step_000012.parquet`` holds the trajectories training step 12 trained on
(``eval_<label>.parquet``: an evaluated model's samples), one row per trajectory
(:data:`~dockyard.train.rollouts.record.SCHEMA`), zstd-compressed. The folder is one table for
``pandas.read_parquet(".../rollouts")``, DuckDB's ``read_parquet('.../rollouts/*.parquet')`` and
``datasets.load_dataset("parquet", data_dir=...)``. Files appear whole (written aside, then
renamed), so a viewer following a live run never reads half a file.

Append-only by step, like ``metrics.jsonl``: a fresh run (``initial_step`` 0) removes an earlier
run's step files; a resumed run keeps the steps up to the one it restarts from and removes the
later ones, as does :meth:`RolloutLog.rewind` (a run that rewound to a checkpoint): every step
appears once, redone steps replace the abandoned ones.

What is logged (``logger.rollouts``): every group with probability ``sample_fraction`` (seeded
by ``seed`` and the step: the same choice on a rerun), and every outlier trajectory besides —
the step's highest and lowest reward, infra errors, integrity flags, truncations.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import try_to_load_from_cache
from tokenizers import Tokenizer

from dockyard.core.config import RolloutLogConfig
from dockyard.train.rollouts.record import FLAG_KEYS, SCHEMA, trajectory_row

FOLDER = "rollouts"


def step_file(step: int) -> str:
    return f"step_{step:06d}.parquet"


class RolloutLog:
    """Writes the rollout log of one run (see the module docstring).

    Args:
        cfg: ``logger.rollouts`` (a ``RolloutLogConfig``).
        log_dir: the run's ``logger.log_dir``.
        tokenizer: the policy's tokenizer name or folder (the log holds decoded text).
        seed: seeds which groups are sampled.
        env: the environment's name, a column of every row.
        initial_step: the step a resumed run starts from (0: a fresh run; None: the folder's
            step files are left alone, as an evaluation does).
    """

    def __init__(
        self,
        cfg: RolloutLogConfig,
        log_dir: str | Path,
        tokenizer: str,
        seed: int = 0,
        env: str = "",
        initial_step: int | None = 0,
    ) -> None:
        self.seed, self.env = seed, env
        self.sample_fraction = cfg.sample_fraction
        self.max_text_chars = cfg.max_text_chars
        self.trainer_logprobs = cfg.trainer_logprobs  # the driver reads it: a logprob pass
        self.entropy = cfg.entropy  # and this: a forward for the token entropies
        self.dir = Path(log_dir) / FOLDER
        self.dir.mkdir(parents=True, exist_ok=True)
        self._decode = Decoder(tokenizer)
        # pyarrow imports pandas at its first table (0.5-7 s here): done now, in the
        # background, while the driver waits for its first groups
        threading.Thread(target=pa.Table.from_pylist, args=([], SCHEMA), daemon=True).start()
        self.seconds = 0.0  # spent writing, in all
        if initial_step is not None:
            self.rewind(initial_step)

    @classmethod
    def open(cls, cfg: RolloutLogConfig, log_dir: str | Path, **kwargs: Any) -> RolloutLog | None:
        """The log ``cfg`` (``logger.rollouts``) asks for, or None when it is off."""
        return cls(cfg, log_dir, **kwargs) if cfg.enabled else None

    def rewind(self, step: int) -> None:
        """Keep the steps ≤ ``step``; remove later ones (and unfinished ``.tmp`` files)."""
        for f in self.dir.glob("step_*.parquet*"):
            n = f.name.removeprefix("step_").split(".")[0]
            if f.name.endswith(".tmp") or not n.isdigit() or int(n) > step:
                f.unlink(missing_ok=True)

    def write_step(
        self,
        step: int,
        groups: list[Any],
        advantages: np.ndarray | None = None,
        trainer_logprobs: np.ndarray | None = None,
        entropy: np.ndarray | None = None,
    ) -> Path:
        """Log the trajectories training step ``step`` (1-based) trained on.

        Args:
            groups: the step's groups, in batch order.
            advantages: ``[B, T] float32`` the batch's advantages (0 off the loss mask).
            trainer_logprobs: ``[B, T] float32`` the trainer's logprobs of the batch, or None.
            entropy: ``[B, T] float32`` the trainer's token entropies of the batch, or None.
        """
        t0 = time.perf_counter()
        why = self.select(step, groups)
        rows = self._rows(groups, why, step, "train", "", advantages, trainer_logprobs, entropy)
        out = write_rows(self.dir / step_file(step), rows)
        self.seconds += time.perf_counter() - t0
        return out

    def write_eval(self, label: str, groups: list[Any]) -> Path:
        """Log every sample of an evaluated model (``label``) as ``eval_<label>.parquet``."""
        why = {
            (gi, si): ["eval"] for gi, g in enumerate(groups) for si in range(len(g.trajectories))
        }
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", label)
        return write_rows(
            self.dir / f"eval_{safe}.parquet", self._rows(groups, why, 0, "eval", label)
        )

    def _rows(
        self,
        groups: list[Any],
        why: dict[tuple[int, int], list[str]],
        step: int,
        kind: str,
        label: str,
        advantages: np.ndarray | None = None,
        trainer_logprobs: np.ndarray | None = None,
        entropy: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        rows, b = [], 0
        for gi, g in enumerate(groups):
            task_id = _task_id(g)
            for si, t in enumerate(g.trajectories):
                if (gi, si) in why:
                    tlp = None if trainer_logprobs is None else trainer_logprobs[b]
                    ent = None if entropy is None else entropy[b]
                    rows.append(
                        trajectory_row(
                            t,
                            self._decode,
                            self.max_text_chars,
                            step=step,
                            kind=kind,
                            run_label=label,
                            task_id=task_id,
                            group=gi,
                            sample=si,
                            env=self.env,
                            logged_because=why[(gi, si)],
                            staleness=step - 1 - t.min_version if kind == "train" else 0,
                            advantage=_mean_advantage(advantages, b),
                            trainer_logprobs=tlp,
                            entropy=ent,
                            gen_s=float(g.metadata.get("gen_s", 0.0)),
                        )
                    )
                b += 1
        return rows

    def select(self, step: int, groups: list[Any]) -> dict[tuple[int, int], list[str]]:
        """``(group, sample) -> why it is logged`` (see the module docstring)."""
        rng = random.Random(f"{self.seed}/{step}")
        frac = self.sample_fraction
        why: dict[tuple[int, int], list[str]] = {}
        trajs = [(gi, si, t) for gi, g in enumerate(groups) for si, t in enumerate(g.trajectories)]
        for gi, g in enumerate(groups):
            if frac >= 1.0 or rng.random() < frac:
                for si in range(len(g.trajectories)):
                    why[(gi, si)] = ["sampled"]
        valid = [(gi, si, t.reward) for gi, si, t in trajs if not t.infra_error]
        if valid:
            top = max(valid, key=lambda x: x[2])
            low = min(valid, key=lambda x: x[2])
            why.setdefault(top[:2], []).append("reward_max")
            why.setdefault(low[:2], []).append("reward_min")
        for gi, si, t in trajs:
            if t.infra_error:
                why.setdefault((gi, si), []).append("infra_error")
            if any(t.metadata.get(k) is True for k in FLAG_KEYS):
                why.setdefault((gi, si), []).append("flag")
            if t.finish_reason == "length":
                why.setdefault((gi, si), []).append("truncated")
        return why


def _task_id(group: Any) -> str:
    """The group's task id as its environment reported it (any sample's ``task_id`` or
    ``instance_id``: some verdicts leave it out), else the group's uid."""
    for t in group.trajectories:
        tid = t.metadata.get("task_id") or t.metadata.get("instance_id")
        if tid:
            return str(tid)
    return str(group.prompt_id)


def _mean_advantage(adv: np.ndarray | None, row: int) -> float:
    if adv is None:
        return 0.0
    a = np.asarray(adv[row])
    nz = a[a != 0]
    return float(nz.mean()) if nz.size else 0.0


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as the Parquet file ``path``, written aside and renamed into place."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return path


class Decoder:
    """Token ids to text with the tokenizer ``name`` (a folder or a Hub name in the local
    cache). The ``tokenizers`` library reads ``tokenizer.json`` directly (no transformers
    import in the driver); transformers' ``AutoTokenizer`` for a tokenizer without one.
    Special tokens are kept: the log shows what the model saw."""

    def __init__(self, name: str) -> None:
        path = Path(name) / "tokenizer.json"
        if not path.is_file():
            cached = try_to_load_from_cache(name, "tokenizer.json")
            path = Path(cached) if isinstance(cached, str) else path
        if path.is_file():
            self._fast: Any = Tokenizer.from_file(str(path))
            self._slow: Any = None
        else:
            from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

            self._fast, self._slow = None, AutoTokenizer.from_pretrained(name)

    def text(self, ids: list[int]) -> str:
        if self._fast is not None:
            return str(self._fast.decode(ids, skip_special_tokens=False))
        return str(self._slow.decode(ids))

    def tokens(self, ids: list[int]) -> list[str]:
        """Each token decoded alone (a piece of a multi-byte character shows as U+FFFD)."""
        one = [[i] for i in ids]
        if self._fast is not None:
            return list(self._fast.decode_batch(one, skip_special_tokens=False))
        return list(self._slow.batch_decode(one))
