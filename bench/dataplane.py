"""The data plane (dockyard.train.runtime.dataplane): what a GRPO step's trajectories cost the
driver, before (the groups fetched into the driver, the batch built there and sent by value to
every trainer rank) and after (the buffer actor builds the batch into Ray's object store, the
ranks resolve its reference; the driver gets references and a summary).

Real parts: Ray, the run's buffer actor (``StepBuffer``), ``--ranks`` trainer ranks of the
torch worker (``PolicyHost`` through ``TrainerClient``, gloo between them) on a tiny random
Qwen2 (vocabulary 1,024, hidden 64), the GRPO loss. Each step puts ``--prompts`` groups of
``--group-size`` trajectories (``--prompt-len`` + ``--response-len`` tokens) into the buffer,
as the collectors do, then times the driver's part of the step: draw, build, train. Columns:

* ``driver MB``: bytes the driver received or sent for the step's data (the pickled groups
  and batches, or the references and the summary);
* ``data s``: the driver's time from the draw to the batch on the ranks (fetch, build, send;
  or draw, build, hold);
* ``step s``: the same plus the optimizer step on the ranks.

Medians over ``--repeats`` steps of each path, interleaved, after one warm-up of each.

    .venv/bin/python bench/dataplane.py                       # ~5 min: 256 × 2,048 tokens
    .venv/bin/python bench/dataplane.py --smoke               # seconds
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import ray

from dockyard.core.experience import Group, Trajectory
from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import build_tiny_model
from dockyard.train.batching import BatchOptions, build_batch, trainer_view
from dockyard.train.runtime.cluster import init_ray
from dockyard.train.runtime.dataplane import remote_buffer
from dockyard.train.runtime.placement import FleetSpec
from dockyard.train.runtime.trainer import TrainerClient


def groups_for(step: int, args: argparse.Namespace) -> list[Group]:
    """``args.prompts`` groups with 0/1 rewards, fresh uids for ``step``."""
    rng = np.random.default_rng(step)
    n, out = args.prompt_len + args.response_len, []
    for p in range(args.prompts):
        trajs = []
        for _ in range(args.group_size):
            mask = np.zeros(n, bool)
            mask[args.prompt_len :] = True
            versions = np.where(mask, 0, -1).astype(np.int32)
            trajs.append(
                Trajectory(
                    prompt_id=f"{step}/{p}",
                    token_ids=rng.integers(3, 1024, n).astype(np.int64),
                    policy_mask=mask,
                    gen_logprobs=np.where(mask, -6.9, 0.0).astype(np.float32),
                    policy_versions=versions,
                    rewards={"reward/tests": float(rng.integers(0, 2))},
                )
            )
        out.append(Group(f"{step}/{p}", trajs, metadata={"uid": f"{step}/{p}"}))
    return out


def before(buffer: Any, trainer: TrainerClient, loss: PolicyLoss, n: int) -> tuple[int, float]:
    """The loop as it was: the groups into the driver, the batch built and sent by value."""
    t0 = time.perf_counter()
    groups = ray.get(buffer.wait_sample.remote(n, 0, 60.0))
    view = trainer_view(build_batch(groups, BatchOptions()))
    moved = len(pickle.dumps(groups)) + len(trainer) * len(pickle.dumps(view))
    ray.get([a.hold.remote(view) for a in trainer.actors])  # by value, as train_step(view) was
    data_s = time.perf_counter() - t0
    trainer.train_held(loss, 1)
    return moved, data_s


def after(buffer: Any, trainer: TrainerClient, loss: PolicyLoss, n: int) -> tuple[int, float]:
    """The data plane: staged and built in the buffer, held by the ranks from a reference."""
    t0 = time.perf_counter()
    assert ray.get(buffer.draw.remote(n, 0, 60.0, False, True)) is not None
    refs, summary = ray.get(buffer.build.remote(n, 0, 0, BatchOptions(), False))
    trainer.hold(refs[0])
    data_s = time.perf_counter() - t0
    moved = len(pickle.dumps(summary)) + sum(len(r.binary()) for r in refs if r is not None)
    trainer.train_held(loss, 1)
    return moved, data_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--response-len", type=int, default=1536)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="4 prompts × 64 tokens, 1 repeat")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.prompt_len, args.response_len, args.repeats = 4, 16, 48, 1

    init_ray(None)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(f"{tmp}/m", vocab_size=1024)
        cfg = {"model_name": str(model), "precision": "float32", "train_micro_batch_size": 8,
               "logprob_batch_size": 8, "optimizer": {"lr": 1e-5}}  # fmt: skip
        spec = FleetSpec("trainer", size=args.ranks, cpus=1)
        trainer = TrainerClient.start(spec, "dockyard.torch.worker:TorchPolicyWorker", cfg)
        ray.get(trainer.ready())
        buffer, loss = remote_buffer(0), PolicyLoss()
        paths = {"before": before, "after": after}
        rows: dict[str, list[tuple[int, float, float]]] = {k: [] for k in paths}
        step = 0
        for i in range(args.repeats + 1):  # the first round warms up
            for name, path in paths.items():
                ray.get(buffer.put_many.remote(groups_for(step, args)))
                step += 1
                t0 = time.perf_counter()
                moved, data_s = path(buffer, trainer, loss, args.prompts)
                if i:
                    rows[name].append((moved, data_s, time.perf_counter() - t0))
        trainer.shutdown()
    ray.shutdown()

    rows_n = args.prompts * args.group_size
    tokens = args.prompt_len + args.response_len
    print(f"\n{rows_n} trajectories × {tokens} tokens, {args.ranks} ranks, median of "
          f"{args.repeats}")  # fmt: skip
    print(f"{'path':8} {'driver MB':>10} {'data s':>8} {'step s':>8}")
    for name, rs in rows.items():
        mb = statistics.median(r[0] for r in rs) / 1e6
        data_s = statistics.median(r[1] for r in rs)
        step_s = statistics.median(r[2] for r in rs)
        print(f"{name:8} {mb:10.3f} {data_s:8.3f} {step_s:8.3f}")
    b, a = (statistics.median(r[2] for r in rows[k]) for k in ("before", "after"))
    print(f"step time after / before: {a / b:.2f}×")


if __name__ == "__main__":
    main()
