"""The reward-model driver: its data (DPO's pairs and a margin), the Bradley–Terry loss over
row scores against a float64 reference, the pre-flight's refusals, the shipped config, a
learning test on the quickstart's task, and the trained model as GRPO's reward (the
``reward_model`` environment)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.rl import BradleyTerryLoss, BradleyTerryPairsLoss, bradley_terry_loss
from dockyard.train.algorithms.dpo import load_pairs
from dockyard.train.algorithms.rm import collate_rm, parse_rm_pair
from dockyard.train.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from test_dpo import expression_pairs, write_jsonl

REPO = Path(__file__).resolve().parents[2]
torch_only = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the RM driver trains on the torch worker"
)


# --------------------------------------------------------------------------- data and loss
def test_pairs_take_an_optional_margin(tmp_path: Path) -> None:
    recs = [{"prompt": "list of size 3", "chosen": "[0]*3", "rejected": "[3]", "margin": 2},
            {"prompt": "list of size 4", "chosen": "[0]*4", "rejected": "[4]"}]  # fmt: skip
    pairs = load_pairs(write_jsonl(tmp_path / "p.jsonl", recs), parse_rm_pair)
    assert [p["margin"] for p in pairs] == [2.0, 0.0]
    assert pairs[1]["prompt"] == [{"role": "user", "content": "list of size 4"}]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**recs[0], "margin": "big"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: 'margin' must be a finite number"):
        load_pairs(bad, parse_rm_pair)


def test_collate_puts_the_margin_on_both_rows_of_a_pair() -> None:
    from dockyard.train.algorithms.dpo import EncodedPair
    from dockyard.train.algorithms.rm import RMPair

    b = collate_rm([RMPair(EncodedPair([5], [7, 2], [8, 9, 2]), 0.5),
                    RMPair(EncodedPair([5, 6], [4, 2], [3, 2]), 1.5)])  # fmt: skip
    assert b.input_ids.shape == (4, 4)
    assert b.extras["margin"].tolist() == [0.5, 0.5, 1.5, 1.5]


@pytest.mark.parametrize("use_margin", [False, True])
def test_the_pairs_loss_is_bradley_terry_in_float64(use_margin: bool) -> None:
    """Two micro-batches of a 6-row step: their losses sum to the step's mean over pairs."""
    rng = np.random.default_rng(0)
    r, margin = rng.normal(size=6), np.repeat(rng.uniform(0, 1, 3), 2)
    m = margin[0::2]
    want = np.mean(np.logaddexp(0.0, -(r[0::2] - r[1::2] - (m if use_margin else 0.0))))
    fn = BradleyTerryPairsLoss(BradleyTerryLoss(use_margin))
    parts = [
        fn(r[s], {"margin": margin[s], "num_sequences": 6.0}) for s in (slice(0, 2), slice(2, 6))
    ]
    assert sum(float(loss) for loss, _ in parts) == pytest.approx(want, rel=1e-12)
    whole, metrics = fn(r, {"margin": margin})
    assert float(whole) == pytest.approx(want, rel=1e-12)
    ref, ref_m = bradley_terry_loss(r[0::2], r[1::2], m if use_margin else None)
    assert float(ref) == pytest.approx(want, rel=1e-12)
    assert metrics["rm_accuracy"] == pytest.approx(float(ref_m["rm_accuracy"]))
    assert metrics["reward_chosen"] == pytest.approx(np.mean(r[0::2]))
    with pytest.raises(ValueError, match=r"whole \(chosen, rejected\) pairs"):
        fn(r[:3], {})


# --------------------------------------------------------------------------- the pre-flight
def _rm_config(tmp_path: Path, model: Path | str, pairs: list[dict[str, Any]]) -> Path:
    cfg = {
        "policy": {"model_name": str(model), "max_total_sequence_length": 512,
                   "precision": "float32", "train_global_batch_size": 4,
                   "train_micro_batch_size": 2, "optimizer": {"lr": 3e-3, "weight_decay": 0.0}},
        "loss_fn": {"type": "bradley_terry"},
        "grpo": {"max_num_steps": 2, "val_at_start": True, "val_at_end": True},
        "data": {"train_path": str(write_jsonl(tmp_path / "train.jsonl", pairs[:8])),
                 "val_path": str(write_jsonl(tmp_path / "val.jsonl", pairs[8:12]))},
        "logger": {"log_dir": str(tmp_path / "logs"), "tensorboard_enabled": False},
        "checkpointing": {"enabled": False},
    }  # fmt: skip
    return write_jsonl(tmp_path / "rm.yaml", [cfg])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.train_path=null", "data.train_path: dockyard rm needs a JSONL or Parquet file"),
        ("policy.jax_cfg.enabled=true policy.dtensor_cfg.enabled=false",
         "policy.jax_cfg.enabled: dockyard rm trains on the torch"),
        ("loss_fn={type:dpo}", "loss_fn.type: 'dpo' is a preference loss, which the "
         "reward-model driver (dockyard rm) does not train (it trains 'bradley_terry')"),
        ("policy.sequence_packing.enabled=true", "policy.sequence_packing.enabled: the reward "
         "model trains padded batches"),
        ("cluster.trainer_ranks=2 policy.dtensor_cfg.context_parallel_size=2",
         "policy.dtensor_cfg.context_parallel_size=2: the reward model scores whole rows"),
    ],
)  # fmt: skip
def test_the_preflight_refuses_bad_input(tmp_path, capsys, override: str, message: str) -> None:
    path = _rm_config(tmp_path, tmp_path, expression_pairs("val", 1))
    (tmp_path / "config.json").write_text("{}")  # a model folder for the models check
    with pytest.raises(SystemExit) as exit_:
        main(["rm", "--config", str(path), *override.split()])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_train_refuses_bradley_terry_and_names_dockyard_rm(tmp_path, capsys) -> None:
    path = _rm_config(tmp_path, tmp_path / "no-model", expression_pairs("val", 1))
    assert main(["config", "check", str(path)]) == 0  # some driver trains it
    with pytest.raises(SystemExit):
        main(["train", "--config", str(path)])
    err = capsys.readouterr().err
    assert "loss_fn.type: 'bradley_terry' is a reward-model loss, which the GRPO driver" in err
    assert "`dockyard rm --config FILE`" in err


# --------------------------------------------------------------------------- on the worker
@pytest.fixture(scope="module")
def tiny() -> Path:
    pytest.importorskip("torch")
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)


@torch_only
def test_the_shipped_config_runs(tiny: Path, tmp_path: Path, capsys) -> None:
    """examples/configs/rm.yaml as shipped, on the tiny model (CI has no quickstart model
    here) for two steps: logs, the accuracy plot and a sequence-classification folder."""
    out = tmp_path / "model"
    args = ["rm", "--config", str(REPO / "examples" / "configs" / "rm.yaml"), "--output",
            str(out), "--no-progress", f"policy.model_name={tiny}", "grpo.max_num_steps=2",
            "grpo.val_period=0", f"logger.log_dir={tmp_path / 'logs'}"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "reward model: 2 steps on 272 pairs" in printed
    assert "on 32 pairs" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/rm_accuracy" in r] == [0, 2]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "logs" / "rm_accuracy.png").stat().st_size > 0


@pytest.fixture(scope="module")
def trained(tiny: Path, tmp_path_factory) -> tuple[Any, Path]:
    """30 steps of 16 pairs on the quickstart's task from the random tiny model (seed 0),
    exported."""
    from transformers import AutoTokenizer

    from dockyard.torch.reward import TorchRewardWorker
    from dockyard.train.algorithms.rm import reward_modelling

    tok = AutoTokenizer.from_pretrained(str(tiny))
    train = [parse_rm_pair(p, "t") for p in expression_pairs("train", per_task=2)]
    val = [parse_rm_pair(p, "t") for p in expression_pairs("val", per_task=1)]
    worker = TorchRewardWorker({"model_name": str(tiny), "precision": "float32", "seed": 0,
                                "train_micro_batch_size": 64, "logprob_batch_size": 64,
                                "optimizer": {"lr": 3e-3, "weight_decay": 0.0}})  # fmt: skip
    out = tmp_path_factory.mktemp("rm") / "model"
    res = reward_modelling(worker, tok, train, val, BradleyTerryLoss(), steps=30, batch_size=16,
                           seed=0, val_period=10, output_dir=out)  # fmt: skip
    return res, out


@torch_only
def test_rm_raises_held_out_pair_accuracy(trained: tuple[Any, Path]) -> None:
    """On specs never trained on, the share of pairs scored chosen > rejected goes from chance
    to ≥ 0.85 and the held-out loss from log 2 to ≤ 0.35. Measured (lr 3e-3, 30 steps of 16
    pairs, seeds 0-3): accuracy 0.53 / 0.22 / 0.38 / 0.78 -> 0.97 / 0.94 / 1.0 / 1.0; loss
    0.69 -> 0.20 / 0.10 / 0.11 / 0.02."""
    res, _ = trained
    start, end = res.val[0], res.val[30]
    assert start["loss"] == pytest.approx(np.log(2), abs=0.02)  # a new head: scores near 0
    assert end["rm_accuracy"] >= 0.85, res.val
    assert end["loss"] <= 0.35, res.val
    assert end["rm_margin"] > 0.0


# --------------------------------------------------------------------------- as GRPO's reward
@torch_only
def test_the_reward_model_env_scores_chosen_above_rejected(trained: tuple[Any, Path]) -> None:
    """The exported folder as an environment (what GRPO's collector calls): concurrent
    ``score`` calls, batched, rank held-out chosen responses above rejected ones as the
    trainer did, and the scores are the worker's."""
    from dockyard.envs.registry import make_env
    from dockyard.envs.reward_model import RewardModelEnvironment

    res, folder = trained
    env = make_env("reward_model", model_path=str(folder), batch_size=8)
    assert isinstance(env, RewardModelEnvironment)
    pairs = expression_pairs("val", per_task=1)
    batches: list[int] = []
    score_texts = env.score_texts

    def counted(items: list[Any]) -> list[float]:
        batches.append(len(items))
        return score_texts(items)

    env.score_texts = counted  # type: ignore[method-assign]

    async def all_scores() -> list[float]:
        calls = [
            env.score({"prompt": p["prompt"]}, p[k]) for p in pairs for k in ("chosen", "rejected")
        ]
        return [r.rewards["reward/reward_model"] for r in await asyncio.gather(*calls)]

    scores = np.array(asyncio.run(all_scores())).reshape(-1, 2)
    accuracy = float(np.mean(scores[:, 0] > scores[:, 1]))
    assert batches == [8] * 8  # 64 concurrent calls, 8 forward passes
    assert accuracy == pytest.approx(res.val[30]["rm_accuracy"], abs=1e-9)
    assert np.mean(scores[:, 0] - scores[:, 1]) == pytest.approx(res.val[30]["rm_margin"], rel=1e-3)
    assert env.prompt({"prompt": "list of size 3"}) == [
        {"role": "user", "content": "list of size 3"}
    ]


@torch_only
def test_a_grpo_config_selects_the_reward_model_env(
    trained: tuple[Any, Path], tiny: Path, tmp_path: Path
) -> None:
    """``env.<name>: {type: reward_model, options: {model_path: ...}}`` passes `dockyard config
    check` and builds through the trainer's code path; a wrong option or folder is refused."""
    from dockyard.core.config import load_config
    from dockyard.train.environments import build_environment

    _, folder = trained
    cfg = {"policy": {"model_name": str(folder), "max_total_sequence_length": 128,
                      "train_global_batch_size": 4, "generation": {"max_new_tokens": 16}},
           "grpo": {"num_prompts_per_step": 2, "num_generations_per_prompt": 2},
           "env": {"rm": {"type": "reward_model", "options": {"model_path": str(folder)}}},
           "data": {"train_path": str(REPO / "examples" / "data" / "dpo_val.jsonl")},
           "logger": {"log_dir": str(tmp_path / "logs")},
           "checkpointing": {"checkpoint_dir": str(tmp_path / "ckpt")}}  # fmt: skip
    path = write_jsonl(tmp_path / "grpo.yaml", [cfg])
    assert main(["config", "check", str(path)]) == 0
    assert main(["train", "--config", str(path), "--dry-run"]) == 0  # every pre-flight check
    loaded = load_config(path)
    env = build_environment("rm", loaded.env["rm"])
    assert env.env.model_path == str(folder)
    with pytest.raises(ValueError, match=r"env\.rm\.options\.model is not an option"):
        build_environment("rm", load_config(path, ["env.rm.options={model: x}"]).env["rm"])
    causal = r"not a sequence-classification model \(architectures: Qwen2ForCausalLM\)"
    for folder, why in ((tiny, causal), (tmp_path, "no Hugging Face model folder there")):
        over = [f"env.rm.options.model_path={folder}"]
        with pytest.raises(ValueError, match=why):
            build_environment("rm", load_config(path, over).env["rm"])
