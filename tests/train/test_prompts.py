"""Prompt rendering (``dockyard.train.prompts``): the tokenizer's chat template, one from the
config (text or a ``.jinja`` file), plain text for a model without one, the prompt and system
prompt files, and the input-length limit; a model without a chat template trains end to end."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.config import MasterConfig
from dockyard.core.interfaces.environment import Environment, StepResult
from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.train.algorithms.configs import collector_config, prompt_renderer
from dockyard.train.prompts import SEPARATOR, PromptRenderer
from dockyard.train.rollout import rollout_group

pytest.importorskip("transformers")

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 7 times 6"},
]


@pytest.fixture(scope="module")
def chat_tok() -> Any:
    """The test tokenizer, with its ChatML template."""
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer

    return AutoTokenizer.from_pretrained(str(build_tokenizer()))


@pytest.fixture(scope="module")
def base_tok() -> Any:
    """The same tokenizer without a chat template (a base model's)."""
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer

    tok = AutoTokenizer.from_pretrained(str(build_tokenizer()))
    tok.chat_template = None
    return tok


def _cfg(**data: Any) -> MasterConfig:
    template = data.pop("chat_template", None)
    return MasterConfig.model_validate(
        {
            "policy": {
                "tokenizer": {"chat_template": template},
                "max_total_sequence_length": 64,
                "generation": {"max_new_tokens": 16},
            },
            "data": data,
        }
    )


def test_plain_mode_joins_the_contents(base_tok: Any) -> None:
    with pytest.raises(ValueError, match=r"no chat template.*'plain'"):
        prompt_renderer(_cfg(), base_tok)
    with pytest.raises(ValueError, match="chat_template"):  # the tokenizer itself refuses
        base_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    r = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    assert r.text(MESSAGES) == "Be brief.\n\nWhat is 7 times 6"
    assert r.prompt_ids(MESSAGES) == base_tok.encode(
        "Be brief.\n\nWhat is 7 times 6", add_special_tokens=False
    )


def test_the_tokenizers_own_template_by_default(chat_tok: Any) -> None:
    r = prompt_renderer(_cfg(), chat_tok)
    want = chat_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert r.text(MESSAGES) == want
    assert want.endswith("<|im_start|>assistant\n")


def test_a_jinja_template_from_text_and_from_a_file(chat_tok: Any, tmp_path: Path) -> None:
    want = "[system] Be brief.\n[user] What is 7 times 6\n[assistant] "
    r = prompt_renderer(_cfg(chat_template=TEMPLATE), chat_tok)
    assert r.text(MESSAGES) == want
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    r = prompt_renderer(_cfg(chat_template=str(tmp_path / "t.jinja")), chat_tok)
    assert r.text(MESSAGES) == want
    assert r.prompt_ids(MESSAGES) == chat_tok.encode(want, add_special_tokens=False)
    assert "<|im_start|>" in chat_tok.chat_template  # the tokenizer itself is left alone
    with pytest.raises(FileNotFoundError, match="chat_template: no file"):
        prompt_renderer(_cfg(chat_template=str(tmp_path / "no.jinja")), chat_tok)
    with pytest.raises(FileNotFoundError, match="no file 'plane'"):
        prompt_renderer(_cfg(chat_template="plane"), chat_tok)


@pytest.mark.parametrize("slot", ["{prompt}", "{}"])
def test_the_prompt_file_wraps_the_user_message(chat_tok: Any, tmp_path: Path, slot: str) -> None:
    f = tmp_path / "prompt.txt"
    f.write_text(f'Solve {{"json": "kept"}}:\n{slot}\nThink step by step.\n')
    r = prompt_renderer(_cfg(prompt_file=str(f)), chat_tok)
    few_shot = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]
    out = r.messages([*few_shot, MESSAGES[1]])
    assert out[:2] == few_shot  # only the last user message is wrapped
    assert out[2]["content"] == 'Solve {"json": "kept"}:\nWhat is 7 times 6\nThink step by step.'
    f.write_text("no placeholder here")
    with pytest.raises(ValueError, match="has no"):
        prompt_renderer(_cfg(prompt_file=str(f)), chat_tok)


def test_the_system_prompt_file_replaces_the_environments(chat_tok: Any, tmp_path: Path) -> None:
    f = tmp_path / "system.txt"
    f.write_text("You are a careful mathematician.\n")
    r = prompt_renderer(_cfg(system_prompt_file=str(f)), chat_tok)
    want = [{"role": "system", "content": "You are a careful mathematician."}, MESSAGES[1]]
    assert r.messages(MESSAGES) == want
    assert r.messages(MESSAGES[1:]) == want  # added where the environment has none
    with pytest.raises(FileNotFoundError, match=r"data\.system_prompt_file"):
        prompt_renderer(_cfg(system_prompt_file=str(tmp_path / "none")), chat_tok)


class Env(Environment):
    """Prompts are the task's text; rewards alternate 0, 1, 0, ... (every group varies)."""

    def __init__(self) -> None:
        super().__init__()
        self.scored = 0

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": task["text"]}]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        self.scored += 1
        return StepResult(rewards={"reward/tests": float(self.scored % 2)})


def test_max_input_seq_length_drops_long_tasks(base_tok: Any, capsys: Any) -> None:
    tasks = [{"text": "add 1 and 2"}, {"text": "add " * 40}, {"text": "x"}]
    r = prompt_renderer(_cfg(chat_template="plain", max_input_seq_length=20), base_tok)
    assert r.filter_tasks(Env(), tasks) == [tasks[0], tasks[2]]
    assert "dropped 1 of 3 training tasks" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"all 1 training tasks .* longer than 20 tokens"):
        r.filter_tasks(Env(), [tasks[1]])
    default = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    assert default.max_input_tokens == 64 - 16


def test_the_default_limit_leaves_room_for_the_response(base_tok: Any) -> None:
    cfg = MasterConfig.model_validate(
        {
            "policy": {
                "tokenizer": {"chat_template": "plain"},
                "max_total_sequence_length": 300,
                "generation": {"max_new_tokens": 100},
            }
        }
    )
    assert prompt_renderer(cfg, base_tok).max_input_tokens == 200


@pytest.mark.parametrize("mode", ["plain", "chat"])
def test_observation_ids_round_trip(chat_tok: Any, base_tok: Any, mode: str) -> None:
    """prompt + reply + observation tokens == the encoding of the whole conversation's text
    (the reply ends with EOS in chat mode, as the engine produces it)."""
    plain = mode == "plain"
    r = (
        prompt_renderer(_cfg(chat_template="plain"), base_tok)
        if plain
        else prompt_renderer(_cfg(), chat_tok)
    )
    tok = r.tokenizer
    reply, obs = "The answer is 42", "Wrong: 7 times 6 is 42 only in base 10"
    prompt = r.prompt_ids(MESSAGES)
    reply_ids = tok.encode(reply, add_special_tokens=False) + ([] if plain else [tok.eos_token_id])
    obs_ids = r.observation_ids(MESSAGES, reply, obs, eos_seen=not plain)
    conv = [*MESSAGES, {"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    full = r.text(MESSAGES) + reply + SEPARATOR + obs if plain else r.text(conv)
    assert prompt + reply_ids + obs_ids == tok.encode(full, add_special_tokens=False)
    if plain:
        assert tok.decode(obs_ids) == "\n\n" + obs


class ScriptedEngine:
    """Replies with fixed tokens (ending with EOS) for the multi-turn check."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        self.prompts.append(list(prompt_ids))
        ids = self.tok.encode("42", add_special_tokens=False)
        return [
            GenerationResult(
                np.asarray(ids, dtype=np.int64),
                np.full(len(ids), -0.5, dtype=np.float32),
                "42",
                "stop",
                np.zeros(len(ids), dtype=np.int32),
            )
            for _ in range(params.n)
        ]


class TwoTurnEnv(Env):
    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        return {"turn": 0}

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        state["turn"] += 1
        if state["turn"] == 1:
            return StepResult(observation="try again", done=False)
        return StepResult(rewards={"reward/tests": 1.0}, done=True)

    async def close(self, state: dict[str, Any]) -> None:
        return None


def test_plain_multi_turn_rollout_is_the_text_of_the_conversation(base_tok: Any) -> None:
    r = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    engine = ScriptedEngine(base_tok)
    task = {"text": "What is 7 times 6"}
    g = asyncio.run(
        rollout_group(engine, TwoTurnEnv(), r, task, "u", SamplingParams(n=1), max_turns=2)
    )
    (t,) = g.trajectories
    text = "What is 7 times 6" + "42" + "\n\ntry again" + "42"
    assert t.token_ids.tolist() == base_tok.encode(text, add_special_tokens=False)
    assert engine.prompts[1] == base_tok.encode(text[: -len("42")], add_special_tokens=False)


class EndlessEnv(TwoTurnEnv):
    """Never ends on its own; its verdict when the rollout's turn limit comes first."""

    def __init__(self, verdict: bool) -> None:
        super().__init__()
        self.verdict = verdict

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        state["turn"] += 1
        return StepResult(observation="go on", done=False)

    async def finish(self, state: dict[str, Any], response: str) -> StepResult | None:
        if not self.verdict:
            return None
        return StepResult(rewards={"reward/tests": 1.0}, metadata={"cut_after": state["turn"]})


@pytest.mark.parametrize("verdict", [True, False], ids=["finish", "no-finish"])
def test_the_rollouts_turn_limit_asks_the_environment_for_its_verdict(base_tok, verdict) -> None:
    """An episode the rollout's ``max_turns`` ends before the environment did is scored by the
    environment's ``finish`` (the tests run on what the policy left), not left unscored."""
    r = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    task = {"text": "What is 7 times 6"}
    env = EndlessEnv(verdict)
    g = asyncio.run(
        rollout_group(ScriptedEngine(base_tok), env, r, task, "u", SamplingParams(n=2), 3)
    )
    for t in g.trajectories:
        assert t.metadata["turns"] == 3
        if verdict:
            assert t.rewards == {"reward/tests": 1.0}
            assert t.metadata["cut_after"] == 3
        else:  # an environment without a verdict before its end: the last step stands
            assert t.rewards == {}
            assert "cut_after" not in t.metadata


class FullContextEngine(ScriptedEngine):
    """Refuses, as vLLM does, a prompt longer than its context from the ``full_at``-th call."""

    def __init__(self, tok: Any, full_at: int) -> None:
        super().__init__(tok)
        self.full_at = full_at

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        if len(self.prompts) + 1 >= self.full_at:
            self.prompts.append(list(prompt_ids))
            raise ValueError(
                f"The decoder prompt (length {len(prompt_ids)}) is longer than the maximum "
                "model length of 16."
            )
        return await super().generate(prompt_ids, params)


def test_an_episode_that_outgrows_the_context_gets_the_environments_verdict(base_tok) -> None:
    """A later turn's context longer than the engine's: the episode ends there (finish reason
    ``length``) with the environment's verdict on it, and the run goes on; a task whose prompt
    alone is too long raises (the collector skips the task)."""
    r = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    task = {"text": "What is 7 times 6"}
    engine = FullContextEngine(base_tok, full_at=3)
    g = asyncio.run(rollout_group(engine, EndlessEnv(True), r, task, "u", SamplingParams(n=1), 5))
    (t,) = g.trajectories
    assert t.metadata["turns"] == 2
    assert t.finish_reason == "length"
    assert t.rewards == {"reward/tests": 1.0}
    assert t.metadata["cut_after"] == 2
    assert not t.infra_error
    text = "What is 7 times 6" + "42" + "\n\ngo on" + "42"  # the refused observation left out
    assert t.token_ids.tolist() == base_tok.encode(text, add_special_tokens=False)
    with pytest.raises(ValueError, match="maximum model length"):
        asyncio.run(rollout_group(FullContextEngine(base_tok, 1), EndlessEnv(True), r, task, "u",
                                  SamplingParams(n=1), 5))  # fmt: skip


def _base_model(tmp_path: Path) -> Path:
    """The tiny model with its tokenizer's chat template removed (like a base model's)."""
    from dockyard.torch.testing import build_tiny_model

    src = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    dst = tmp_path / "base-model"
    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").unlink(missing_ok=True)
    conf = json.loads((dst / "tokenizer_config.json").read_text())
    conf.pop("chat_template", None)
    (dst / "tokenizer_config.json").write_text(json.dumps(conf))
    return dst


def test_a_model_without_a_chat_template_trains(tmp_path: Path) -> None:
    """Plain prompts (with a prompt file) -> the transformers engine generates -> a GRPO batch
    -> a torch train step that moves the weights."""
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from dockyard.core.rl import PolicyLoss
    from dockyard.serve.engines.hf_engine import TransformersEngine
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.batching import BatchOptions, build_batch, trainer_view

    model = _base_model(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(model))
    assert tok.chat_template is None
    (tmp_path / "prompt.txt").write_text("Question: {prompt}\nAnswer:")
    cfg = MasterConfig.model_validate(
        {
            "policy": {"model_name": str(model), "tokenizer": {"chat_template": "plain"}},
            "data": {"prompt_file": str(tmp_path / "prompt.txt")},
        }
    )
    r = prompt_renderer(cfg, tok)
    engine = asyncio.run(TransformersEngine(str(model)).start())
    params = SamplingParams(n=4, max_tokens=6, temperature=1.0, seed=0)
    tasks = [{"text": "what is 7 times 6?"}, {"text": "add 2 and 3"}]

    env = Env()

    async def collect() -> list[Any]:
        return [
            await rollout_group(engine, env, r, t, f"u{i}", params) for i, t in enumerate(tasks)
        ]

    groups = asyncio.run(collect())
    prompt = tok.encode("Question: what is 7 times 6?\nAnswer:", add_special_tokens=False)
    first = groups[0].trajectories[0]
    assert first.token_ids[: len(prompt)].tolist() == prompt
    assert not first.policy_mask[: len(prompt)].any()
    assert first.policy_mask[len(prompt) :].all()
    batch = trainer_view(build_batch(groups, BatchOptions()))
    assert np.abs(batch.advantages).max() > 0
    worker = TorchPolicyWorker(
        {"model_name": str(model), "precision": "float32", "train_micro_batch_size": 8,
         "reference_policy": False, "optimizer": {"lr": 1e-2}}
    )  # fmt: skip
    before = worker.get_logprobs(batch)
    m = worker.train_step(batch, PolicyLoss("clipped_pg", {"agg": "token-mean"}))
    assert np.isfinite(m["loss"])
    assert not np.allclose(worker.get_logprobs(batch), before)


def test_the_collector_actor_renders_and_filters_by_the_config(tmp_path: Path, capsys: Any) -> None:
    """``CollectorHost`` (the Ray actor's class, built here in-process) renders with the
    config's renderer and trains only on the tasks whose prompt fits."""
    from dockyard.train.environments import build_environment, load_dataset
    from dockyard.train.runtime.collector import CollectorHost, load_tokenizer

    model = _base_model(tmp_path)
    cfg: dict[str, Any] = {
        "policy": {
            "model_name": str(model),
            "tokenizer": {"chat_template": "plain"},
            "max_total_sequence_length": 64,
            "generation": {"backend": "transformers", "max_new_tokens": 16},
        },
        "env": {"expression": {"type": "expression"}},
        "data": {"dataset_name": "expression"},
    }
    urls = ["http://127.0.0.1:9"]  # never called: nothing is scored here
    tasks = load_dataset("expression", "train")
    master = MasterConfig.model_validate(cfg)
    r = prompt_renderer(master, load_tokenizer(str(model)))
    env = build_environment("expression", master.env["expression"], urls)
    lengths = [len(r.prompt_ids(r.messages(env.prompt(t)))) for t in tasks]
    assert min(lengths) < max(lengths)
    cfg["data"]["max_input_seq_length"] = max(lengths) - 1
    own = collector_config(MasterConfig.model_validate(cfg), 1, 0)
    assert own.prompts.max_input_tokens == max(lengths) - 1
    host = CollectorHost(own, [], None, urls, tasks)
    assert isinstance(host.tokenizer, PromptRenderer)
    assert host.tokenizer.plain
    kept = [t for t, n in zip(tasks, lengths, strict=True) if n < max(lengths)]
    assert host.loader.tasks == kept
    assert f"dropped {len(tasks) - len(kept)} of {len(tasks)} training tasks" in (
        capsys.readouterr().err
    )


class ScreenEnv(TwoTurnEnv):
    """Shows a screen before the first turn (a desktop environment's ``observe``)."""

    async def observe(self, state: dict[str, Any]) -> StepResult:
        screen = np.zeros((4, 4, 3), dtype=np.uint8)
        return StepResult(observation="a screen", done=False, metadata={"images": [screen]})


def test_a_screen_needs_a_chat_template_that_renders_images(base_tok: Any, chat_tok: Any) -> None:
    plain = prompt_renderer(_cfg(chat_template="plain"), base_tok)
    with pytest.raises(ValueError, match="chat_template: plain"):
        asyncio.run(rollout_group(ScriptedEngine(base_tok), ScreenEnv(), plain, {"text": "x"},
                                  "u", SamplingParams(n=1), max_turns=2))  # fmt: skip
    r = prompt_renderer(_cfg(), chat_tok)
    first = r.with_first_observation(MESSAGES, "a screen", images=1)
    assert first[-1]["content"] == [
        {"type": "text", "text": "What is 7 times 6"},
        {"type": "image"},
        {"type": "text", "text": "a screen"},
    ]
    assert r.observation_messages("next", None, images=2)[0]["content"][:2] == [
        {"type": "image"},
        {"type": "image"},
    ]


def test_the_prompt_file_wraps_the_text_of_a_message_with_a_screen(
    tmp_path: Path, chat_tok
) -> None:
    """A user message whose content is parts (an image beside the text, as the first screen of
    a desktop episode or an SFT demonstration has it): the prompt file wraps its text part."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Task: {prompt}\n")
    r = prompt_renderer(_cfg(prompt_file=str(prompt)), chat_tok)
    content = [{"type": "text", "text": "click OK"}, {"type": "image"}]
    (m,) = r.messages([{"role": "user", "content": content}])
    assert m["content"] == [{"type": "text", "text": "Task: click OK"}, {"type": "image"}]
    assert content[0]["text"] == "click OK"  # the caller's message is left as it was
