"""Environments as Ray actors: several in parallel on a real local Ray cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dockyard.envs.code import CodeEnvironment, load_humaneval
from dockyard.envs.math import ArithmeticGenerator, MathEnvironment
from dockyard.train.runtime.cluster import init_ray, shutdown_ray

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray started the way the runtime starts it (``init_ray``: retries a slow start and
    keeps workers on this interpreter also under ``uv run``, as in ``./dev test``)."""
    init_ray(SimpleNamespace(cpus_per_node=2))
    yield
    shutdown_ray()


def test_env_actors_score_in_parallel(ray_cluster, sandbox_url):
    MathActor = ray.remote(num_cpus=0)(MathEnvironment)
    CodeActor = ray.remote(num_cpus=0)(CodeEnvironment)
    maths = [MathActor.remote(verify_timeout_s=10) for _ in range(2)]
    codes = [CodeActor.remote(sandbox_url) for _ in range(2)]

    arith = ArithmeticGenerator(seed=7, levels=(1, 2, 3)).tasks(8)
    math_refs = [
        maths[i % 2].score.remote(t, f"\\boxed{{{t['answer']}}}") for i, t in enumerate(arith)
    ]
    math_refs += [maths[i % 2].score.remote(t, "\\boxed{-99999}") for i, t in enumerate(arith)]
    problems = load_humaneval()[:6]
    code_refs = [
        codes[i % 2].score.remote(t, "```python\n" + t["canonical_solution"] + "```")
        for i, t in enumerate(problems)
    ]
    code_refs += [
        codes[0].score.remote(
            problems[0], "```python\ndef has_close_elements(a, b):\n    return 1/0\n```"
        )
    ]

    math_res = ray.get(math_refs, timeout=300)
    code_res = ray.get(code_refs, timeout=300)
    assert [r.rewards["reward/correct"] for r in math_res] == [1.0] * 8 + [0.0] * 8
    assert [r.rewards["reward/tests"] for r in code_res] == [1.0] * 6 + [0.0]
    assert not any(r.infra_error for r in math_res + code_res)
    # prompts come back through the actor too
    assert ray.get(maths[0].prompt.remote(arith[0]))[-1]["content"] == arith[0]["problem"]
