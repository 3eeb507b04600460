"""One group of external-scaffold episodes: the rollout mode where an agent scaffold, not
dockyard's loop, drives the model.

Per episode (G of them per task, concurrently)::

    state = await env.reset(task)              # a sandbox session holding the task's repository
    key = endpoint.open()                      # the episode's base URL .../episodes/<key>/v1
    await to_thread(runner.run, ctx)           # the scaffold: model via the URL, commands in
                                               # the session; it decides when it is done
    result = finish(state)                     # the workspace diff scored by the held-out tests
                                               # (the sandbox's finish, in a fresh sandbox)
    trajectories = assemble(endpoint.close(key), result)   # the engine's recorded tokens

The reward path is the environment's: ``env.finish_result(state)`` (the terminal / repository
agent environments' ``finish`` request) turned into rewards by
:func:`dockyard.envs.sandboxed.verdict_to_step` in the environment's reward mode. A sandbox that
failed (session not created, ``finish`` infra error) masks the episode (``infra_error``); a
scaffold that crashed or ended early is still scored on its diff (``metadata["scaffold"]``
says how it ended).

One trajectory per episode: GRPO's groups hold exactly G samples (advantages per group). Where
the scaffold broke the extension property (:mod:`dockyard.train.endpoint.recorder`: compacted or
edited history, or a reply it discarded, as mini-swe-agent does on a format error) the episode's
*last* segment is trained — it holds the turns that led to the scored workspace — and the earlier
segments' policy tokens are counted in ``metadata["dropped_policy_tokens"]`` (``segments`` says
how many there were).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

from dockyard.core.experience import Group, Trajectory
from dockyard.core.interfaces.environment import StepResult
from dockyard.core.interfaces.generation import SamplingParams
from dockyard.envs.rewards import infra_failure
from dockyard.envs.sandboxed import verdict_to_step
from dockyard.train.endpoint.recorder import assemble
from dockyard.train.endpoint.scaffold import EpisodeContext
from dockyard.train.endpoint.server import Endpoint, EndpointServer
from dockyard.train.prompts import PromptRenderer


async def score_session(env: Any, state: dict[str, Any], exit_status: str) -> StepResult:
    """The held-out tests' verdict on the session's workspace diff, as rewards."""
    if state.get("infra_error"):
        return infra_failure(str(state["infra_error"]))
    try:
        result = await env.finish_result(state)
    except Exception as e:  # the sandbox service failed: infrastructure
        return infra_failure(f"finish: {type(e).__name__}: {e}")
    meta = env.episode_metadata(state) if hasattr(env, "episode_metadata") else {}
    return verdict_to_step(
        result, env.reward.mode, task_id=state["task"].get("id"), end_reason=exit_status, **meta
    )


class ExternalScaffold:
    """The endpoint and a scaffold runner, run per episode (see the module docstring).

    Args:
        runner: a :class:`~dockyard.train.endpoint.scaffold.ScaffoldRunner`.
        max_turns: the most model requests per episode (``ctx.max_turns``).
        host / port / advertise: where the endpoint listens (:class:`EndpointServer`).
        model: the model name the endpoint serves.
        timeout_s: the wall-clock limit of one scaffold run; past it the episode is scored as
            it stands (the scaffold's thread is left to end on its own when its next request
            gets a 404).
    """

    def __init__(
        self,
        runner: Any,
        *,
        max_turns: int = 30,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise: str | None = None,
        model: str = "dockyard",
        timeout_s: float = 1800.0,
    ) -> None:
        self.runner, self.max_turns, self.model, self.timeout_s = (
            runner,
            max_turns,
            model,
            timeout_s,
        )
        self.host, self.port, self.advertise = host, port, advertise
        self.servers: dict[int, EndpointServer] = {}  # one per engine client

    async def server_for(
        self, engine: Any, renderer: Any, params: SamplingParams
    ) -> EndpointServer:
        base = getattr(engine, "engine", engine)  # the collector's timing wrapper: its client
        srv = self.servers.get(id(base))
        if srv is None:
            port = self.port + len(self.servers) if self.port else 0
            ep = Endpoint(engine, renderer, params, self.model)
            srv = await EndpointServer(ep, self.host, port, self.advertise).start()
            self.servers[id(base)] = srv
        srv.endpoint.params = replace(params, n=1)
        return srv

    async def aclose(self) -> None:
        for s in self.servers.values():
            await s.stop()
        self.servers.clear()

    async def episode(
        self,
        srv: EndpointServer,
        env: Any,
        renderer: PromptRenderer,
        task: dict[str, Any],
        uid: str,
    ) -> Trajectory:
        t0 = time.perf_counter()
        state = await env.reset(task)
        key = srv.endpoint.open()
        scaffold: dict[str, Any] = {"exit_status": "not_started"}
        try:
            if not state.get("infra_error"):
                messages = renderer.messages(env.prompt(task))
                users = [m["content"] for m in messages if m.get("role") == "user"]
                system = next((m["content"] for m in messages if m.get("role") == "system"), "")
                client = env._client_for(state)  # the service holding the session
                ctx = EpisodeContext(
                    base_url=srv.base_url(key),
                    api_key=key,
                    model=self.model,
                    task=task,
                    instruction=users[-1] if users else "",
                    system_prompt=system,
                    sandbox_url=client.url,
                    sandbox_token=getattr(env.pool, "token", None),
                    session_id=state["session_id"],
                    max_turns=self.max_turns,
                )
                try:
                    scaffold = await asyncio.wait_for(
                        asyncio.to_thread(self.runner.run, ctx), self.timeout_s
                    )
                except TimeoutError:
                    scaffold = {"exit_status": "timeout"}
                except Exception as e:  # the scaffold's own crash: its episode ends here
                    scaffold = {"exit_status": type(e).__name__, "error": str(e)[:500]}
            record = srv.endpoint.close(key)
            result = await score_session(env, state, str(scaffold.get("exit_status", "")))
        finally:
            srv.endpoint.episodes.pop(key, None)
            with contextlib.suppress(Exception):
                await env.close(state)
        segs = assemble(uid, record, result, scaffold=scaffold, env_s=time.perf_counter() - t0)
        last = segs[-1]  # GRPO's groups hold G samples: one per episode (module docstring)
        last.metadata["dropped_policy_tokens"] = sum(int(t.policy_mask.sum()) for t in segs[:-1])
        return last

    async def rollout_group(
        self,
        engine: Any,
        env: Any,
        renderer: Any,
        task: dict[str, Any],
        uid: str,
        params: SamplingParams,
    ) -> Group:
        """``params.n`` episodes of ``task`` (the collector's ``rollout_group`` for this mode)."""
        r = PromptRenderer.wrap(renderer)
        srv = await self.server_for(engine, r, params)
        t0 = time.perf_counter()
        eps = await asyncio.gather(*(self.episode(srv, env, r, task, uid) for _ in range(params.n)))
        return Group(
            prompt_id=uid,
            trajectories=list(eps),
            metadata={"uid": uid, "gen_s": time.perf_counter() - t0},
        )
