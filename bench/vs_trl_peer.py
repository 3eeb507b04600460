"""The peer of ``bench/vs_trl.py``: TRL's ``GRPOTrainer`` with the shared hyperparameters, run
as a child of the bench (``vs_trl.py _trl SPEC``), and the measures read from its events.

The child writes one JSON line per event to ``spec["events"]``: ``train_begin`` (with torch's
thread count and the OpenMP variables it inherited), ``step`` (each ``on_step_end``, with the
step's generate-and-score time and its reward function's time), ``log`` (TRL's logs: reward,
completion length, its cumulative ``num_tokens``) and ``saved``.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from vs_trl_task import prompt, read_jsonl, rewards

P, G = 8, 8  # prompts per step, samples per prompt
MAX_GRAD_NORM = 1.0
EPSILON = 0.2


def trl_args(spec: dict[str, Any]) -> Any:
    """TRL's ``GRPOConfig`` with the shared hyperparameters (see the module docstring)."""
    from trl.trainer.grpo_config import GRPOConfig

    return GRPOConfig(
        output_dir=str(Path(spec["out"]).parent / "trl_output"),
        per_device_train_batch_size=P * G,  # samples: one generation batch of 8 prompts × 8
        gradient_accumulation_steps=1,
        num_generations=G,
        num_iterations=1,
        max_completion_length=spec["max_new_tokens"],
        max_steps=spec["steps"],
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=MAX_GRAD_NORM,
        beta=0.0,
        epsilon=EPSILON,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        model_init_kwargs={"dtype": "float32"},
        shuffle_dataset=False,
        seed=spec["seed"],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )


def trl_main(spec_path: str) -> int:
    """The ``trl`` system (a child process): GRPOTrainer on the spec's model and data; step
    ends, logs and the generate-and-score time of each step go to ``spec["events"]``."""
    spec = read_jsonl(Path(spec_path))[0]
    events = Path(spec["events"])

    def event(kind: str, **kw: Any) -> None:
        with events.open("a") as f:
            f.write(json.dumps({"event": kind, "t": time.time(), **kw}) + "\n")

    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl.trainer.grpo_trainer import GRPOTrainer

    tasks = read_jsonl(Path(spec["train"]))
    by_id = {t["id"]: t for t in tasks}
    system = spec["system_prompt"]
    data = Dataset.from_list([{"prompt": prompt(t, system), "task_id": t["id"]} for t in tasks])
    gen_s: list[float] = []
    reward_s: list[float] = []

    def reward_fn(completions: list[Any], task_id: list[str], **_: Any) -> list[float]:
        t0 = time.perf_counter()
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        out = rewards([by_id[i] for i in task_id], texts)
        reward_s.append(time.perf_counter() - t0)
        return out

    class Clock(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            import torch

            threads = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
            event("train_begin", torch_threads=torch.get_num_threads(), env=threads)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            g, r = gen_s.pop() if gen_s else None, reward_s.pop() if reward_s else None
            event("step", step=state.global_step, gen_s=g, reward_s=r)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            event("log", step=state.global_step, logs=logs or {})

    trainer = GRPOTrainer(
        model=spec["model"],
        reward_funcs=reward_fn,  # pyright: ignore[reportArgumentType]
        args=trl_args(spec),
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(spec["model"]),
        callbacks=[Clock()],
    )
    generate = trainer._generate_and_score_completions

    def timed(*a: Any, **kw: Any) -> Any:  # generation + reward of a step (TRL's "phase")
        t0 = time.perf_counter()
        out = generate(*a, **kw)
        gen_s.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed  # pyright: ignore[reportAttributeAccessIssue]
    shapes: list[tuple[int, int]] = []  # (rows, columns) of each batch TRL's loss forwards
    compute_loss = trainer.compute_loss

    def shaped(model: Any, inputs: Any, *a: Any, **kw: Any) -> Any:
        p, c = inputs["prompt_ids"], inputs["completion_ids"]
        shapes.append((int(p.shape[0]), int(p.shape[1] + c.shape[1])))
        return compute_loss(model, inputs, *a, **kw)

    trainer.compute_loss = shaped  # pyright: ignore[reportAttributeAccessIssue]
    trainer.train()
    trainer.save_model(spec["out"])
    event("saved")
    rows, cols = sorted(shapes)[len(shapes) // 2]
    t0 = time.perf_counter()
    floor_s = training_floor(trainer.model, rows, cols)
    # its time is taken out of TRL's wall and exit figures (trl_result): it is the bench's
    event("floor", rows=rows, cols=cols, floor_s=floor_s, spent_s=time.perf_counter() - t0)
    return 0


def training_floor(model: Any, rows: int, cols: int, reps: int = 10) -> float:
    """The compute floor of TRL's trainer phase: a plain transformers training step (forward
    to every position's logits, log-softmax, backward, grad-norm clip, AdamW) on a batch of the
    shape TRL's loss forwarded (its median: padded prompts + completions), median of ``reps``
    after two warm-ups, same process and threads. TRL's "rest of the step" over this floor is
    what its own bookkeeping costs; the floor itself is the work (tokens × parameters)."""
    import torch

    torch.manual_seed(0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, model.config.vocab_size, (rows, cols))
    took = []
    for _ in range(reps + 2):
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits
        lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])
        (-lp.mean()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        opt.step()
        opt.zero_grad()
        took.append(time.perf_counter() - t0)
    return statistics.median(took[2:])


def trl_result(run: dict[str, Any]) -> dict[str, float]:
    """Per-run measures of a TRL run from its callback's events (module docstring)."""
    events = [json.loads(x) for _, x in run["lines"]]
    steps = [e for e in events if e["event"] == "step"]
    begin_event = next(e for e in events if e["event"] == "train_begin")
    begin = begin_event["t"]
    saved = next(e["t"] for e in events if e["event"] == "saved")
    ends = [e["t"] for e in steps]
    took = [b - a for a, b in zip([begin, *ends[:-1]], ends, strict=True)]
    later = took[1:] or took  # the steps after the first (all, for a 1-step run)
    gen = [e.get("gen_s") or 0.0 for e in steps][-len(later) :]
    logs = [e["logs"] for e in events if e["event"] == "log" and "reward" in e["logs"]]
    step_s = statistics.median(later)
    out = {
        "step_s": step_s,
        "steps_per_hour": 3600 / step_s,
        "startup_s": ends[0] - run["spawn"],
        "wall_s": run["exit"] - run["spawn"],
        "exit_lag_s": run["exit"] - ends[-1],
        "completion_len": statistics.mean(x["completions/mean_length"] for x in logs),
        "reward_mean": statistics.mean(x["reward"] for x in logs),
        "steps": float(len(steps)),
        "trl/to_train_begin_s": begin - run["spawn"],  # imports, model, GRPOTrainer()
        "exit/save_s": saved - ends[-1],  # trainer.save_model
        "exit/after_s": run["exit"] - saved,  # the interpreter's exit
        "trl/generate_score_s": statistics.median(gen),
        "trl/rest_of_step_s": statistics.median(t - g for t, g in zip(later, gen, strict=True)),
        "trl/reward_s": statistics.median(e.get("reward_s") or 0.0 for e in steps),
        "trl/torch_threads": float(begin_event.get("torch_threads", 0)),
    }
    floor = next((e for e in events if e["event"] == "floor"), None)
    if floor is not None:  # a plain training step on TRL's batch shape (training_floor)
        for k in ("wall_s", "exit_lag_s", "exit/after_s"):  # the measurement is not TRL's exit
            out[k] -= floor["spent_s"]
        out["trl/floor_s"] = floor["floor_s"]
        out["trl/floor_tokens"] = float(floor["rows"] * floor["cols"])
        out["trl/rest_over_floor"] = out["trl/rest_of_step_s"] / floor["floor_s"]
    # the trainer's share: what follows generation and scoring (TRL trains in the same step)
    out["trainer_share"] = out["trl/rest_of_step_s"] / step_s
    counts = [x["num_tokens"] for x in logs if "num_tokens" in x]  # cumulative, real tokens
    if len(counts) > 1:
        out["tokens_per_step"] = statistics.median(b - a for a, b in itertools.pairwise(counts))
        # TRL forwards every sequence whole (its padding, not counted here, comes on top)
        out["tokens_forwarded_per_step"] = out["tokens_per_step"]
    return out
