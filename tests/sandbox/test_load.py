"""Loopback load: hundreds of concurrent tiny tasks, none lost or duplicated, flat memory."""

from __future__ import annotations

import asyncio

import pytest

from dockyard.sandbox.launch import start_service
from dockyard.sandbox.models import Task, Verdict

pytestmark = pytest.mark.slow


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_hundreds_of_concurrent_tasks_no_loss_no_duplicates_flat_memory() -> None:
    n_warm, n = 40, 240
    with start_service(workers=2, queue_size=1024) as svc:

        async def burst(start: int, count: int) -> list:
            async with svc.async_client(max_connections=count) as c:
                tasks = [
                    Task(test_command=f"echo {i}", timeout_s=30, metadata={"i": i})
                    for i in range(start, start + count)
                ]
                return await c.run_tasks(tasks, concurrency=count)

        asyncio.run(burst(0, n_warm))
        before = _rss_mb(svc.pid)
        results = asyncio.run(burst(n_warm, n))
        after = _rss_mb(svc.pid)
    assert [r.verdict for r in results].count(Verdict.passed) == n, {r.verdict for r in results}
    got = [int(r.stdout) for r in results]
    assert got == list(range(n_warm, n_warm + n))  # each result is its own task's, in order
    assert [r.metadata["i"] for r in results] == got
    assert len({r.task_id for r in results}) == n
    assert after - before < 40, (before, after)
