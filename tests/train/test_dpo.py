"""The DPO driver: its data (strings or chat messages, JSONL or Parquet, errors that name the
line), every variant one step on the real torch worker with the reference pass run once (none
for SimPO / ORPO), pairs kept whole in every batching mode, the command with LoRA, the refusal
of a preference loss by `dockyard train`, and a learning test on the quickstart's task."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.train.algorithms.dpo import collate_pairs, load_data, load_pairs, parse_pair
from dockyard.train.cli import main

REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("dpo", "cdpo", "ipo", "dpop", "rdpo", "simpo", "orpo")
REFERENCE_FREE = ("simpo", "orpo")


def expression_pairs(split: str, per_task: int = 2) -> list[dict[str, Any]]:
    """Preference pairs of the quickstart's task: chosen a correct expression for the spec,
    rejected a classic slip (dockyard.envs.expression's templates)."""
    from dockyard.envs.expression import BUGGY, GOOD, load_tasks, prompt_text

    out = []
    for t in load_tasks(split):
        good, bad, n = GOOD[t["kind"]], BUGGY[t["kind"]], t["size"]
        for i in range(per_task):
            out.append(
                {
                    "prompt": prompt_text(t),
                    "chosen": good[(n + i) % len(good)].format(n=n),
                    "rejected": bad[(n + i) % len(bad)].format(n=n),
                }
            )
    return out


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --------------------------------------------------------------------------- data
def test_strings_and_chat_messages_load_alike(tmp_path: Path) -> None:
    user = [{"role": "user", "content": "list of size 3"}]
    forms = [
        {"prompt": "list of size 3", "chosen": "[0]*3", "rejected": "[3]"},
        {"prompt": user, "chosen": [{"role": "assistant", "content": "[0]*3"}], "rejected": "[3]"},
        {"prompt": user, "chosen": "[0]*3", "rejected": {"role": "assistant", "content": "[3]"}},
    ]
    pairs = load_pairs(write_jsonl(tmp_path / "p.jsonl", forms))
    assert pairs == [{"prompt": user, "chosen": "[0]*3", "rejected": "[3]"}] * 3
    system = [{"role": "system", "content": "Answer with an expression."}, *user]
    assert parse_pair({**forms[0], "prompt": system}, "x")["prompt"] == system


def test_parquet_loads_like_jsonl(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    records = [
        {
            "prompt": [{"role": "user", "content": f"str of size {n}"}],
            "chosen": [{"role": "assistant", "content": f"'a'*{n}"}],
            "rejected": [{"role": "assistant", "content": f"str({n})"}],
        }
        for n in (2, 3, 4)
    ]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "p.parquet")
    assert load_pairs(tmp_path / "p.parquet") == load_pairs(
        write_jsonl(tmp_path / "p.jsonl", records)
    )
    bad = [{**records[0], "rejected": [{"role": "assistant", "content": ""}]}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet:row 1: 'rejected' is an empty response"):
        load_pairs(tmp_path / "bad.parquet")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "p", "chosen": "a"}, r":2: a preference pair needs .* missing 'rejected'"),
        ({"prompt": "p", "chosen": "  ", "rejected": "b"}, r":2: 'chosen' is an empty response"),
        ({"prompt": "", "chosen": "a", "rejected": "b"}, r":2: 'prompt' is empty"),
        ({"prompt": "p", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"},
         r":2: 'chosen' must be a string or one assistant message"),
        (["not", "an", "object"], r":2: not a JSON object but a list"),
    ],
)  # fmt: skip
def test_bad_data_names_the_file_and_line(tmp_path: Path, record: Any, message: str) -> None:
    path = write_jsonl(
        tmp_path / "bad.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"}, record]
    )
    with pytest.raises(ValueError, match=re.escape(str(path)) + message):
        load_pairs(path)


def test_a_tenth_is_held_out_without_a_val_path(tmp_path: Path) -> None:
    from dockyard.core.config import config_from_dict

    pairs = [{"prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(30)]
    path = write_jsonl(tmp_path / "p.jsonl", pairs)
    cfg = config_from_dict({"loss_fn": {"type": "dpo"}, "data": {"train_path": str(path)}})
    train, val = load_data(cfg)
    assert (len(train), len(val)) == (27, 3)
    assert {p["prompt"][0]["content"] for p in train + val} == {f"p{i}" for i in range(30)}
    assert load_data(cfg) == (train, val)  # seeded


def test_collate_puts_each_pair_on_adjacent_rows() -> None:
    from dockyard.train.algorithms.dpo import EncodedPair

    pairs = [EncodedPair([5, 6], [7, 2], [8, 9, 2]), EncodedPair([5], [4, 2], [3, 2])]
    ref = [(np.array([-1.0, -2.0]), np.array([-3.0, -4.0, -5.0])),
           (np.array([-6.0, -7.0]), np.array([-8.0, -9.0]))]  # fmt: skip
    b = collate_pairs(pairs, ref)
    assert b.input_ids.tolist() == [
        [5, 6, 7, 2, 0],
        [5, 6, 8, 9, 2],
        [5, 4, 2, 0, 0],
        [5, 3, 2, 0, 0],
    ]
    assert b.loss_mask.astype(int).tolist() == [
        [0, 0, 1, 1, 0], [0, 0, 1, 1, 1], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0]
    ]  # fmt: skip
    assert b.ref_logprobs is not None
    assert b.ref_logprobs[1].tolist() == [0, 0, -3, -4, -5]
    assert b.ref_logprobs[2].tolist() == [0, -6, -7, 0, 0]


def test_shipped_example_data_is_what_its_generator_writes() -> None:
    path = REPO / "examples" / "data" / "make_expression_data.py"
    spec = importlib.util.spec_from_file_location("make_expression_data", path)
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for name, records in gen.files().items():
        assert (path.parent / name).read_text() == gen.render(records), (
            f"examples/data/{name} is stale: run python {path.relative_to(REPO)}"
        )
    assert len(load_pairs(path.parent / "dpo_val.jsonl")) == 32


# --------------------------------------------------------------------------- the commands
def _grpo_config(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "grpo.yaml", [{
        "policy": {"model_name": str(tmp_path / "no-model"), "max_total_sequence_length": 128,
                   "train_global_batch_size": 4, "generation": {"max_new_tokens": 32}},
        "grpo": {"num_prompts_per_step": 2, "num_generations_per_prompt": 2},
        "env": {"math": {"type": "math"}}, "data": {"dataset_name": "arithmetic"},
        "logger": {"log_dir": str(tmp_path / "logs")},
        "checkpointing": {"checkpoint_dir": str(tmp_path / "ckpt")},
    }])  # fmt: skip


def test_train_refuses_a_preference_loss_and_names_dockyard_dpo(tmp_path, capsys) -> None:
    path = _grpo_config(tmp_path)
    assert main(["config", "check", str(path), "loss_fn={type: dpo}"]) == 0
    assert "loss_fn.type dpo runs with `dockyard dpo`" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(path), "loss_fn={type: dpo, beta: 0.2}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "loss_fn.type: 'dpo' is a preference loss, which the GRPO driver" in err
    assert "run this config with `dockyard dpo --config FILE`" in err
    with pytest.raises(SystemExit) as exit_:  # and the DPO driver a policy-gradient one
        main(["dpo", "--config", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "loss_fn.type: 'clipped_pg' is a policy-gradient loss, which the DPO driver" in err
    assert "data.train_path: dockyard dpo needs a JSONL or Parquet file" in err


def test_grpo_train_refuses_a_preference_loss_built_in_code(tmp_path) -> None:
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.grpo import train

    cfg = load_config(_grpo_config(tmp_path), ["loss_fn={type: ipo}"])
    with pytest.raises(ValueError, match="`dockyard dpo --config FILE`"):
        train(cfg)


# --------------------------------------------------------------------------- on the worker
torch_only = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the DPO driver trains on the torch worker"
)


@pytest.fixture(scope="module")
def tiny() -> Path:
    pytest.importorskip("torch")
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)


def worker(model: Path, **over: Any) -> Any:
    from dockyard.torch.worker import TorchPolicyWorker

    cfg = {"model_name": str(model), "precision": "float32", "train_micro_batch_size": 64,
           "logprob_batch_size": 64, "reference_policy": False,
           "optimizer": {"lr": 3e-3, "weight_decay": 0.0}}  # fmt: skip
    return TorchPolicyWorker({**cfg, **over})


class Counting:
    """A worker that records the rows of every ``get_logprobs`` call and how many train steps
    came before it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.steps = inner, 0
        self.calls: list[tuple[int, list[tuple[int, ...]]]] = []

    def get_logprobs(self, batch: Any) -> np.ndarray:
        rows = [
            tuple(r[m].tolist()) for r, m in zip(batch.input_ids, batch.attention_mask, strict=True)
        ]
        self.calls.append((self.steps, rows))
        return self.inner.get_logprobs(batch)

    def train_step(self, batch: Any, loss_fn: Any) -> dict[str, float]:
        self.steps += 1
        return self.inner.train_step(batch, loss_fn)

    def export_hf(self, path: str) -> str:
        return self.inner.export_hf(path)


def _rows(tok: Any, pairs: list[dict[str, Any]]) -> set[tuple[int, ...]]:
    from dockyard.train.algorithms.dpo import encode_all

    b = collate_pairs(encode_all(tok, [parse_pair(p, "t") for p in pairs], None, "t"))
    return {tuple(r[m].tolist()) for r, m in zip(b.input_ids, b.attention_mask, strict=True)}


@torch_only
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_trains_with_one_reference_pass(tiny: Path, variant: str) -> None:
    from transformers import AutoTokenizer

    from dockyard.core.rl import PreferenceLoss
    from dockyard.train.algorithms.dpo import dpo

    tok = AutoTokenizer.from_pretrained(str(tiny))
    pairs = expression_pairs("val", per_task=1)
    train, val = pairs[:8], pairs[8:12]
    w = Counting(worker(tiny))
    loss = PreferenceLoss(variant, {"beta": 0.1, "sft_weight": 0.2})
    res = dpo(w, tok, [parse_pair(p, "t") for p in train], [parse_pair(p, "t") for p in val],
              loss, steps=2, batch_size=4, val_at_start=True, val_at_end=True)  # fmt: skip
    before = Counter(r for steps, rows in w.calls if steps == 0 for r in rows)
    after = {r for steps, rows in w.calls if steps > 0 for r in rows}
    train_rows, val_rows = _rows(tok, train), _rows(tok, val)
    assert not train_rows & after, "training pairs went through the policy again"
    assert after == val_rows  # the end's evaluation
    if variant in REFERENCE_FREE:  # no reference pass; the start's evaluation only
        assert set(before) == val_rows
        assert set(before.values()) == {1}
    else:  # one pass over every pair, whose held-out part is also the start's evaluation
        assert set(before) == train_rows | val_rows
        assert set(before.values()) == {1}
        assert res.val[0]["preference_accuracy"] == 0.5  # π = π_ref: every pair ties
        assert res.val[0]["reward_margin"] == 0.0
    assert sorted(res.val) == [0, 2]
    assert len(res.history) == 2
    assert all(np.isfinite(h["loss"]) for h in res.history)
    assert 0.0 <= res.history[-1]["preference_accuracy"] <= 1.0


@torch_only
def test_pairs_stay_whole_in_every_batching_mode(tiny: Path) -> None:
    """The first step's loss and gradient (before any update) are the same whatever the
    micro-batching: an odd micro-batch size, dynamic batching and packing all keep each pair
    together (the metrics, loss-token-weighted means over micro-batches, may differ)."""
    from transformers import AutoTokenizer

    from dockyard.core.rl import PreferenceLoss, PreferencePairsLoss
    from dockyard.train.algorithms.dpo import encode_all, response_logprobs

    tok = AutoTokenizer.from_pretrained(str(tiny))
    enc = encode_all(tok, [parse_pair(p, "t") for p in expression_pairs("val", 1)[:6]], None, "t")
    ref = [(c + 0.1, r - 0.1) for c, r in response_logprobs(worker(tiny), enc)]
    batch, fn = collate_pairs(enc, ref), PreferencePairsLoss(PreferenceLoss("dpo"))
    modes = [{"train_micro_batch_size": 3}, {"dynamic_batching": {"enabled": True, "train_mb_tokens": 40}},
             {"sequence_packing": {"enabled": True, "train_mb_tokens": 40}}]  # fmt: skip
    want = worker(tiny).train_step(batch, fn)
    for mode in modes:
        got = worker(tiny, **mode).train_step(batch, fn)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5), mode
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4), mode


@torch_only
def test_dockyard_dpo_with_lora_logs_and_exports(tiny: Path, tmp_path: Path, capsys) -> None:
    pairs = expression_pairs("val", per_task=1)
    cfg = {
        "policy": {"model_name": str(tiny), "max_total_sequence_length": 512, "precision": "float32",
                   "train_global_batch_size": 4, "train_micro_batch_size": 2,
                   "optimizer": {"lr": 3e-3, "weight_decay": 0.0},
                   "lora": {"enabled": True, "rank": 4, "alpha": 8.0,
                            "target_modules": ["q_proj", "v_proj"]}},
        "loss_fn": {"type": "dpo", "beta": 0.1},
        "grpo": {"max_num_steps": 3, "val_at_start": True, "val_at_end": True},
        "data": {"train_path": str(write_jsonl(tmp_path / "train.jsonl", pairs[:12])),
                 "val_path": str(write_jsonl(tmp_path / "val.jsonl", pairs[12:16]))},
        "logger": {"log_dir": str(tmp_path / "logs"), "tensorboard_enabled": False},
        "checkpointing": {"enabled": False},
    }  # fmt: skip
    path = write_jsonl(tmp_path / "dpo.yaml", [cfg])
    assert (
        main(["dpo", "--config", str(path), "--output", str(tmp_path / "out"), "--no-progress"])
        == 0
    )
    out = capsys.readouterr().out
    assert "DPO (dpo): 3 steps on 12 pairs" in out
    assert "0.500 (step 0) -> " in out
    assert f"plot: {tmp_path / 'logs' / 'dpo_accuracy.png'}" in out
    assert (tmp_path / "logs" / "dpo_accuracy.png").stat().st_size > 1000
    rows = [
        json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows if "val/preference_accuracy" in r] == [0, 3]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    end = next(r for r in rows if r["step"] == 3 and "val/reward_margin" in r)
    assert end["val/reward_margin"] != 0.0  # the adapters moved the policy off the reference
    assert (tmp_path / "out" / "config.json").is_file()
    assert (tmp_path / "out" / "model.safetensors").is_file()


@torch_only
@pytest.mark.parametrize("command", ["dpo", "sft"])
def test_the_shipped_config_runs(tiny: Path, tmp_path: Path, command: str) -> None:
    """examples/configs/{dpo,sft}.yaml as shipped, on the tiny model (CI has no quickstart
    model here) for two steps."""
    out = tmp_path / "model"
    args = [command, "--config", str(REPO / "examples" / "configs" / f"{command}.yaml")]
    args += ["--output", str(out)] + ([] if command == "sft" else ["--no-progress"])
    overrides = [f"policy.model_name={tiny}", "grpo.max_num_steps=2", "grpo.val_period=0",
                 f"logger.log_dir={tmp_path / 'logs'}"]  # fmt: skip
    assert main(args + overrides) == 0
    assert (out / "config.json").is_file()


# --------------------------------------------------------------------------- it learns
@torch_only
def test_dpo_raises_held_out_preference_accuracy(tiny: Path) -> None:
    """DPO on the quickstart's task (chosen: a correct expression, rejected: a classic slip)
    from a random tiny model: on specs never trained on, the implicit-reward accuracy goes from
    0.5 (π = π_ref, every pair ties) to ≥ 0.9 and the policy's own preference (mean token
    logprob) from 0.31 to ≥ 0.9. Measured (seeds 0, 1): accuracy 0.5 -> 1.0 / 0.97 at step 10,
    1.0 at 40; logp accuracy 0.31 -> 1.0; held-out loss 0.693 -> 0.053 / 0.048."""
    from transformers import AutoTokenizer

    from dockyard.core.rl import PreferenceLoss
    from dockyard.train.algorithms.dpo import dpo

    tok = AutoTokenizer.from_pretrained(str(tiny))
    train = [parse_pair(p, "t") for p in expression_pairs("train", per_task=2)]
    val = [parse_pair(p, "t") for p in expression_pairs("val", per_task=1)]
    res = dpo(worker(tiny, seed=0), tok, train, val, PreferenceLoss("dpo", {"beta": 0.1}),
              steps=40, batch_size=16, seed=0, val_period=20)  # fmt: skip
    start, end = res.val[0], res.val[40]
    assert start["preference_accuracy"] == 0.5
    assert end["preference_accuracy"] >= 0.9, res.val
    assert start["logp_accuracy"] < 0.5  # the random model prefers the slips (0.31)
    assert end["logp_accuracy"] >= 0.9, res.val
    assert end["reward_margin"] > 0.0
