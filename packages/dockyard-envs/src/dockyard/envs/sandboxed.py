"""Scoring through the sandbox service: client handling and verdict → reward.

Environments that execute code hold a :class:`SandboxPool` (one or more service URLs, used
round-robin) and turn each :class:`~dockyard.sandbox.models.TaskResult` into a
:class:`~dockyard.core.interfaces.environment.StepResult` with :func:`verdict_to_step`:

* verdict ``infra_error`` (service down, died mid-task, lost the task, queue full past the
  client's patience) → ``infra_error=True``, no reward: the trainer masks the sample;
* ``tests_tampered`` or ``patch_rejected`` → ``reward/tests = 0`` and the integrity flag set in
  metadata (``integrity_violation``), counted by the metrics;
* otherwise ``reward/tests`` = 1.0 if resolved, else 0 (``binary``) or the fraction of the
  held-out tests that passed (``fraction``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.rewards import TESTS, infra_failure
from dockyard.sandbox.client import AsyncSandboxClient
from dockyard.sandbox.models import TaskResult, Verdict


class SandboxPool:
    """Async clients to one or more sandbox services, one set per event loop, round-robin.

    Use one event loop per pool (a Ray actor's, or your ``asyncio.run``) and ``await
    aclose()`` before that loop ends, or its open connections are reported as leaked.

    Args:
        urls: service base URLs (``env.<name>.sandbox_urls`` in the config).
        token: bearer token, if the services require one.
        max_wait_s: how long a client keeps retrying a full queue (429) before infra_error.
    """

    def __init__(
        self, urls: str | Sequence[str], token: str | None = None, max_wait_s: float = 120.0
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("sandbox_urls is empty: give at least one sandbox service URL")
        self.token = token
        self.max_wait_s = max_wait_s
        self._loop_id: int | None = None
        self._clients: list[AsyncSandboxClient] = []
        self._rr = itertools.count()

    def client(self) -> AsyncSandboxClient:
        """A client bound to the running event loop (httpx clients cannot cross loops)."""
        loop_id = id(asyncio.get_running_loop())
        if loop_id != self._loop_id:
            self._clients = [
                AsyncSandboxClient(u, self.token, max_wait_s=self.max_wait_s) for u in self.urls
            ]
            self._loop_id = loop_id
        return self._clients[next(self._rr) % len(self._clients)]

    async def aclose(self) -> None:
        """Close the clients of the running loop; call before that loop ends."""
        clients, self._clients, self._loop_id = self._clients, [], None
        for c in clients:
            await c.aclose()

    def __getstate__(self) -> dict[str, Any]:  # picklable for Ray: clients are rebuilt per loop
        return {"urls": self.urls, "token": self.token, "max_wait_s": self.max_wait_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["urls"], state["token"], state["max_wait_s"])  # type: ignore[misc]


def tests_fraction(result: TaskResult) -> float:
    if not result.tests:
        return 0.0
    return sum(1 for o in result.tests.values() if o == "passed") / len(result.tests)


OUTPUT_TAIL = 2000  # characters of the verifier's stdout and stderr kept in a step's metadata


def verdict_to_step(result: TaskResult, mode: str = "binary", **metadata: Any) -> StepResult:
    """See the module docstring. ``metadata`` is merged into the step's metadata."""
    verdict = Verdict(result.verdict)
    if verdict == Verdict.infra_error:
        return infra_failure(
            result.detail or "sandbox infra_error", verdict=verdict.value, **metadata
        )
    if verdict == Verdict.needs_network:  # a task declaring the internet, refused a host here:
        return infra_failure(  # what this node cannot give, never a 0 (masked, named)
            f"needs_network: {result.detail}", verdict=verdict.value, needs_network=True,
            **metadata,
        )  # fmt: skip
    integrity = bool(result.tests_tampered) or verdict == Verdict.patch_rejected
    if integrity:
        reward = 0.0
    elif mode == "fraction":
        reward = 1.0 if result.resolved else tests_fraction(result)
    else:
        reward = 1.0 if result.resolved else 0.0
    return StepResult(
        rewards={TESTS: reward},
        metadata={
            "verdict": verdict.value,
            "resolved": bool(result.resolved),
            "tests": {k: str(v) for k, v in result.tests.items()},
            "tests_passed_fraction": tests_fraction(result),
            "tests_tampered": bool(result.tests_tampered),
            "tamper_paths": list(result.tamper_paths),
            "patch_applied": bool(result.patch_applied),
            "integrity_violation": integrity,
            "sandbox_s": result.timings.total_s,
            "detail": result.detail[:500],
            "stdout": result.stdout[-OUTPUT_TAIL:],  # bounded: the rollout log keeps them
            "stderr": result.stderr[-OUTPUT_TAIL:],
            **metadata,
        },
    )
