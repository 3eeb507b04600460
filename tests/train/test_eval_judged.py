"""The judge seam: environments that grade with the LLM judge (hle, gdpval, gdpval_agentic) get
a ``JudgeFn`` from the runtime, as sandbox environments get URLs; a judgment that failed masks
the sample and is counted (``judge/failed``), never a silent 0 or 1.

* unit: the runtime's wiring (build_environment, env_judge's errors);
* a real vLLM engine as the judge: unconstrained, a random tiny model cannot answer ``SCORE: n``,
  so every judgment fails — the mechanics (requests, retries, masking, counts) on a real engine;
  constrained (``judge.constrained``: vLLM's structured output), the same model answers in format
  and grades a GDPval reference deliverable in the real sandbox and an HLE free-form answer with
  no failure. A random model's scores are noise: no score threshold is tested here (the GDPval
  thresholds are over the deterministic criteria: tests/envs/test_gdpval.py);
* the example configs grpo_gdpval(.agentic) / grpo_hle: GRPO steps end to end on a tiny model
  with the real sandbox and their constrained judge fleet.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.config.sections import EnvConfig
from dockyard.envs.hle.data import fixture_path, hle_tasks
from dockyard.train.environments import build_environment, needs_judge, option_problems
from dockyard.train.judge import Judge, env_judge, judge_fn, verdict_regex

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def _judge_task() -> dict[str, Any]:
    rows = [json.loads(x) for x in fixture_path().read_text().splitlines() if x.strip()]
    return next(t for t in hle_tasks(rows)[0] if t["match"] == "judge")


def test_the_runtime_hands_its_judge_to_an_environment_that_needs_one() -> None:
    async def fn(prompt: str, response: str) -> float | None:
        return 1.0

    assert needs_judge("hle", EnvConfig(type="hle"))
    assert not needs_judge("m", EnvConfig(type="math"))
    env = build_environment("hle", EnvConfig(type="hle"), judge=fn)
    assert env.env.judge is fn
    with pytest.raises(ValueError, match=r"judge\.mode: rubric"):
        build_environment("hle", EnvConfig(type="hle"))  # no judge: a clear error
    # the judge comes from the runtime, never from options
    problems = option_problems("hle", EnvConfig(type="hle", options={"judge": "x"}))
    assert problems
    assert "not an option" in problems[0]
    math = build_environment("m", EnvConfig(type="math"), judge=fn)  # takes none: not passed
    assert math is not None


def test_env_judge_refuses_a_section_that_cannot_grade() -> None:
    pairwise = config_from_dict({"judge": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1",
                                           "model_name": "j"}}).judge  # fmt: skip
    with pytest.raises(ValueError, match=r"judge\.mode"):
        env_judge(pairwise)
    engine = config_from_dict({"judge": {"mode": "rubric", "model_name": "x"}}).judge
    with pytest.raises(ValueError, match="judge fleet"):
        env_judge(engine, engines=None)
    fn = env_judge(pairwise.model_copy(update={"mode": "rubric", "score_min": 0, "score_max": 4}))
    assert fn.judge.score_range == (0, 4)
    fn.judge.close()


class _Scripted:
    """A backend answering fixed replies in turn (the code around the judge, not the judge)."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)

    async def complete(self, messages, temperature, max_tokens) -> str:
        return self.replies.pop(0)


def test_a_constrained_judge_needs_a_backend_that_constrains() -> None:
    assert verdict_regex("pairwise") == "VERDICT: (A|B)"
    assert verdict_regex("rubric", 0, 3) == "SCORE: (0|1|2|3)"
    with pytest.raises(ValueError, match="cannot constrain"):
        Judge(_Scripted(), mode="rubric", constrained=True)
    with pytest.raises(ValueError, match=r"judge\.constrained: only backend 'engine'"):
        config_from_dict({"judge": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1",
                                    "model_name": "j", "constrained": True}})  # fmt: skip


def test_judge_fn_maps_the_scale_to_0_1_and_none_stays_none() -> None:
    judge = Judge(_Scripted("SCORE: 7", "no", "nope"), mode="rubric", score_range=(2, 12),
                  max_retries=1)  # fmt: skip
    fn = judge_fn(judge)
    assert judge.run(fn("p", "r")) == 0.5
    assert judge.run(fn("p", "r")) is None
    assert judge.metrics()["judge/failed"] == 1.0
    judge.close()


# --------------------------------------------------------------------------- a real engine
vllm_marks = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(scope="module")
def rubric_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    """A rubric judge on a random tiny model in a vLLM engine in this process."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir
    from dockyard.train.judge import EngineBackend

    model = tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m")
    engine = VLLMEngine(str(model), dtype="float32", max_model_len=1024, enforce_eager=True, seed=0)
    judge = Judge(EngineBackend([engine], AutoTokenizer.from_pretrained(str(model))),
                  mode="rubric", max_retries=1, temperature=1.0, max_tokens=8)  # fmt: skip
    judge.run(engine.start())
    yield judge
    judge.run(engine.aclose())
    judge.close()


def _with_vllm(test: Any) -> Any:
    for mark in vllm_marks:
        test = mark(test)
    return test


@_with_vllm
def test_a_real_engine_judges_hle_and_gdpval_answers_masked_and_counted(
    rubric_judge: Judge,
) -> None:
    from dockyard.envs.gdpval.rubric import grade
    from dockyard.envs.gdpval.tasks import load_tasks
    from dockyard.envs.hle import HleEnvironment

    fn = judge_fn(rubric_judge)
    hle = HleEnvironment(judge=fn)
    task = _judge_task()
    r = rubric_judge.run(hle.score(task, f"Explanation: known.\nAnswer: {task['answer']}"))
    m = rubric_judge.metrics()
    assert r.infra_error, r
    assert r.rewards == {}
    assert r.metadata["judge_failed"]
    assert (m["judge/requests"], m["judge/retries"], m["judge/failed"]) == (2, 1, 1), m
    assert m["judge/parse_failures"] + m["judge/errors"] == 2
    # an exact-match question never reaches the judge
    exact = next(t for t in hle_tasks([json.loads(x) for x in fixture_path().read_text()
                                        .splitlines()])[0] if t["match"] == "exact")  # fmt: skip
    r = rubric_judge.run(hle.score(exact, f"Answer: {exact['answer']}"))
    assert r.rewards["reward/correct"] == 1.0
    assert rubric_judge.metrics()["judge/requests"] == 0
    # GDPval: the judge criteria of a delivered README are asked; failed → the grade is masked
    readme = next(t for t in load_tasks() if t["id"] == "readme_md")
    g = rubric_judge.run(grade(readme, {"README.md": b"# csvtidy\n## Usage\n"}, fn))
    assert g.judge_failed
    assert rubric_judge.metrics()["judge/failed"] == 1.0


@_with_vllm
def test_a_constrained_engine_judge_grades_deliverables_and_answers(rubric_judge: Judge) -> None:
    """The same random model, its replies constrained to the verdict line: every judgment parses
    (none masked); a GDPval reference program runs in the real sandbox and its judge criteria
    are judged, in both variants (single-turn and an agentic episode); an HLE free-form answer
    gets a score in [0, 1]."""
    from dockyard.envs.gdpval.agentic import GdpvalAgenticEnvironment
    from dockyard.envs.gdpval.env import GdpvalEnvironment
    from dockyard.envs.gdpval.tasks import load_tasks, reference_program
    from dockyard.envs.hle import HleEnvironment
    from dockyard.sandbox.launch import start_service

    rubric_judge.regex = verdict_regex("rubric", *rubric_judge.score_range)
    stack = contextlib.ExitStack()
    try:
        fn = judge_fn(rubric_judge)
        task = next(t for t in load_tasks() if t["id"] == "readme_md")
        answer = f"```python\n{reference_program(task)}```"
        svc_url = stack.enter_context(start_service(workers=2)).url
        gdpval = GdpvalEnvironment(svc_url, judge=fn, timeout_s=60)

        async def go() -> Any:
            try:
                return await gdpval.score(task, answer)
            finally:
                await gdpval.aclose()

        r = rubric_judge.run(go())
        m = rubric_judge.metrics()
        assert not r.infra_error, r.metadata
        judged = [c for c in r.metadata["criteria"] if c["type"] == "judge"]
        assert judged
        assert all(c["detail"] == "judged" and 0.0 <= c["score"] <= 1.0 for c in judged), judged
        assert m["judge/requests"] == len(judged), m
        assert m["judge/failed"] == m["judge/parse_failures"] == 0, m
        # the agentic variant: a scripted agent writes and runs the reference program in its
        # session, submits; what it left is graded, judge criteria by the same judge
        agentic = GdpvalAgenticEnvironment(svc_url, judge=fn, max_turns=4)
        calls = [("write_file", {"path": "make.py", "content": reference_program(task)}),
                 ("run", {"command": "python make.py"}), ("submit", {})]  # fmt: skip

        async def episode() -> Any:
            state = await agentic.reset(task)
            try:
                for name, args in calls:
                    call = json.dumps({"name": name, "arguments": args})
                    step = await agentic.step(state, f"<tool_call>{call}</tool_call>")
                    if step.done:
                        return step
                raise AssertionError("the episode did not end")
            finally:
                await agentic.close(state)
                await agentic.aclose()

        a = rubric_judge.run(episode())
        m = rubric_judge.metrics()
        assert not a.infra_error, a.metadata
        judged = [c for c in a.metadata["criteria"] if c["type"] == "judge"]
        assert judged
        assert all(c["detail"] == "judged" for c in judged), judged
        assert (m["judge/requests"], m["judge/failed"]) == (len(judged), 0), m
        hle_task = _judge_task()
        h = rubric_judge.run(HleEnvironment(judge=fn).score(hle_task, "Answer: a guess"))
        assert not h.infra_error, h.metadata
        assert 0.0 <= h.metadata["judge_score"] <= 1.0, h.metadata
        assert rubric_judge.metrics()["judge/failed"] == 0
    finally:
        rubric_judge.regex = None
        stack.close()


# --------------------------------------------------------------------------- the example configs
@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's tiny model, untrained (mechanics only: no warm start needed)."""
    pytest.importorskip("vllm")
    from dockyard.train.cli.quickstart import build_model

    return build_model(0)


@pytest.fixture(scope="module")
def ray_session():
    from dockyard.train.runtime.cluster import init_ray, shutdown_ray

    init_ray(None)
    yield
    shutdown_ray()


@_with_vllm
@pytest.mark.parametrize("name", ["grpo_gdpval", "grpo_gdpval_agentic", "grpo_hle"])
def test_the_judged_example_configs_train(
    name: str, tiny_policy: Path, tmp_path: Path, ray_session
) -> None:
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.grpo import train

    # the judge fleet: the same tiny model, its replies constrained (the shipped judge section)
    overrides = [f"policy.model_name={tiny_policy}", f"judge.model_name={tiny_policy}",
                 f"logger.log_dir={tmp_path}/logs", f"checkpointing.checkpoint_dir={tmp_path}/ckpt"]  # fmt: skip
    if name != "grpo_hle":  # HLE: two steps, its judge counters are reported per step
        overrides.append("grpo.max_num_steps=1")  # (the CI budget)
    cfg = load_config(CONFIGS / f"{name}.yaml", overrides)
    res = train(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert res.steps == cfg.grpo.max_num_steps == len(rows)
    for row in rows:
        assert (
            row["trajectories"]
            == cfg.grpo.num_prompts_per_step * cfg.grpo.num_generations_per_prompt
        )
        assert row["infra_error_fraction"] < 1.0  # the environment really scored something
    assert cfg.judge.constrained
    # the judge fleet was wired in: its counters are reported each step, and a constrained
    # judge's replies always parse (none masked)
    assert all(row["judge/failed"] == row["judge/parse_failures"] == 0 for row in rows), rows
