"""Every shipped OSWorld task and toy tasks through the real environment and sandbox desktop: the
scripted oracle solves each one, doing nothing solves none; an invalid action is penalised and
counted; an episode's replay is written and animated.

One episode per task: after the task's set-up, the evaluator is run on the untouched desktop
(what the do-nothing agent, answering DONE at once, is scored on), then the oracle plays.
``DOCKYARD_OSWORLD_GIF=path`` also copies the animated replay there (how the docs' one is made).
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageColor

from dockyard.envs.osworld.agents import NoopAgent, OracleAgent
from dockyard.envs.osworld.env import TASK, OSWorldEnvironment
from dockyard.envs.osworld.evaluators import evaluate
from dockyard.envs.osworld.replay import write_gif
from dockyard.envs.osworld.tasks import load_tasks
from dockyard.envs.osworld.toy import DATA, toy_tasks
from dockyard.envs.rewards import INVALID_ACTION

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(sandbox_service):
    """The suite's sandbox service (conftest), once the desktop's programs are known present."""
    if not (shutil.which("Xvfb") and shutil.which("openbox") and shutil.which("wish")):
        pytest.fail("needs xvfb, openbox, xdotool, tk, xterm (see .ci/run)")
    return sandbox_service


async def _episode(env: OSWorldEnvironment, task: dict) -> tuple[float, dict]:
    """(what do-nothing scores, the oracle's final result) in one session."""
    state = await env.reset(task)
    try:
        assert state["infra_error"] is None, state["infra_error"]
        if task["id"].startswith("toy-click"):
            _assert_buttons_painted(task, state["obs"])
        noop = NoopAgent(task).act(state["obs"])
        empty = await evaluate(task["evaluator"], state["guest"], Path(task["folder"]), noop)
        agent = OracleAgent(task)
        while True:
            r = await env.step(state, agent.act(state["obs"]))
            if r.done:
                return empty, {"rewards": r.rewards, "meta": r.metadata, "infra": r.infra_error}
    finally:
        await env.close(state)


def _assert_buttons_painted(task: dict, obs) -> None:
    """A toy click task's buttons show their colour on the screen (what a small screenshot
    keeps of them), just above each label's text."""
    shot = Image.open(io.BytesIO(base64.b64decode(obs.png_b64))).convert("RGB")
    window = next(w for w in obs.windows if w.title == "Toy")
    args = task["config"][1]["parameters"]["command"][5:]
    for label, x, y in zip(args[::3], args[1::3], args[2::3], strict=True):
        pixel = shot.getpixel((window.x + int(x), window.y + int(y) - 13))
        assert pixel == ImageColor.getrgb(label), (task["id"], label, pixel)


async def _all(url: str, token: str | None, tasks: list[dict]) -> list[tuple[float, dict]]:
    env = OSWorldEnvironment(url, token=token, max_turns=12, settle_s=0.3)
    sem = asyncio.Semaphore(3)

    async def one(t: dict) -> tuple[float, dict]:
        async with sem:
            return await _episode(env, t)

    try:
        return await asyncio.gather(*(one(t) for t in tasks))
    finally:
        await env.aclose()


def test_oracle_solves_every_task_and_nothing_solves_none(service) -> None:
    shipped = [t.as_dict() for t in load_tasks(DATA)[0]]
    tasks = shipped + toy_tasks(4, seed=1)
    results = asyncio.run(_all(service.url, service.token, tasks))
    solved_empty = [t["id"] for t, (e, _) in zip(tasks, results, strict=True) if e > 0]
    assert solved_empty == [], "doing nothing must not pass these tasks"
    for t, (_, r) in zip(tasks, results, strict=True):
        assert not r["infra"], (t["id"], r["meta"])
        assert r["rewards"][TASK] == 1.0, (t["id"], r["meta"])
        assert r["meta"]["invalid_actions"] == 0, t["id"]


def _empty_episode(tmp: Path) -> Path:
    ep = tmp / "empty"
    ep.mkdir()
    (ep / "episode.json").write_text('{"steps": [{"frame": null, "actions": []}]}')
    return ep


def test_invalid_action_penalised_and_replay_animated(service, tmp_path: Path) -> None:
    task = toy_tasks(1, seed=7, kinds=("click",))[0]
    env = OSWorldEnvironment(
        service.url, token=service.token, replay_dir=str(tmp_path), screen=(320, 240)
    )

    async def run() -> dict:
        state = await env.reset(task)
        try:
            r = await env.step(state, "```python\nimport os\nos.remove('answer.txt')\n```")
            assert not r.done
            assert "refused" in r.observation
            agent = OracleAgent(task)
            while not r.done:
                r = await env.step(state, agent.act(state["obs"]))
            return {"rewards": r.rewards, "meta": r.metadata}
        finally:
            await env.close(state)
            await env.aclose()

    r = asyncio.run(run())
    assert r["rewards"][TASK] == 1.0
    assert r["meta"]["invalid_actions"] == 1
    assert r["rewards"][INVALID_ACTION] == -env.reward.invalid_action_penalty
    ep = Path(r["meta"]["replay"])
    cli = pytest.importorskip("dockyard.train.cli")  # `dockyard osworld replay EPISODE`
    assert cli.main(["osworld", "replay", str(ep), "--out", str(tmp_path / "r.gif")]) == 0
    gif = tmp_path / "r.gif"
    with pytest.raises(ValueError, match="no frames"):
        write_gif(_empty_episode(tmp_path))
    with Image.open(gif) as im:
        assert im.format == "GIF"
        assert im.n_frames == len(list((ep / "frames").iterdir())) >= 3
    if os.environ.get("DOCKYARD_OSWORLD_GIF"):
        shutil.copy(gif, os.environ["DOCKYARD_OSWORLD_GIF"])
