"""The seam between an environment whose reward (or part of it) comes from an LLM judge and the
judge itself, which lives in the application package (``dockyard.train.judge``).

dockyard-envs never imports dockyard-train. An environment that grades with a judge is
registered with ``needs_judge=True`` (:class:`dockyard.envs.registry.EnvSpec`) and takes a
``judge`` constructor keyword: a :data:`JudgeFn` the runtime builds from the config's ``judge``
section and hands over, exactly as it hands ``sandbox_urls`` to an environment that
``needs_sandbox``. The environment only knows the call::

    score = await judge(prompt, response)   # a float in [0, 1], or None

``prompt`` is the question the judge answers (the task, the reference answer or the rubric
criterion, written by the environment), ``response`` what is judged. ``None`` means the judgment
failed (never parsed after its retries, the judge unreachable): the caller masks the sample
(:func:`dockyard.envs.rewards.infra_failure`) and counts it in ``metadata["judge_failed"]``;
it never turns a failed judgment into 0 or 1.

The rubric judge of dockyard-train answers ``SCORE: n`` with ``score_min ≤ n ≤ score_max``; its
adapter (``dockyard.train.judge.judge_fn``) maps n to ``(n − score_min) / (score_max −
score_min)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

JudgeFn = Callable[[str, str], Awaitable[float | None]]
"""``async (prompt, response) -> score in [0, 1] | None`` (None: failed, mask the sample)."""


class NoJudgeError(ValueError):
    """An environment built without the judge it needs."""


def require_judge(judge: JudgeFn | None, env: str) -> JudgeFn:
    """``judge``, or a :class:`NoJudgeError` naming the config keys that provide one."""
    if judge is None:
        raise NoJudgeError(
            f"the {env} environment grades free-form answers with an LLM judge: configure the "
            "`judge` section (judge.mode: rubric, and judge.model_name for backend 'engine' or "
            "judge.base_url for backend 'openai'); the runtime then passes it to the environment"
        )
    return judge
