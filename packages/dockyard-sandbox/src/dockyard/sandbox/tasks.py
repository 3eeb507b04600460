"""The one-shot task queue: a bounded worker pool, a bounded queue, cancellation and draining.

``workers`` tasks run at once (each in a thread that drives its jail); up to ``queue_size``
more wait. Beyond that, submissions get HTTP 429 with a ``Retry-After`` estimated from the
recent task time. Finished results are kept for ``GET .../result`` within a window bounded by
count, bytes and age (oldest first out); a finished task's request (its files and patch) is
dropped at once, so the service's memory does not grow with what it has run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dockyard.sandbox.executor import Context, execute
from dockyard.sandbox.jail import Cancel
from dockyard.sandbox.metrics import Metrics
from dockyard.sandbox.models import Task, TaskResult, TaskState


@dataclass
class Record:
    id: str
    task: Task | None  # dropped once the task is done
    created: float
    state: TaskState = TaskState.queued
    result: TaskResult | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancel: Cancel = field(default_factory=Cancel)


class TaskManager:
    def __init__(
        self,
        ctx: Context,
        workers: int,
        queue_size: int,
        metrics: Metrics,
        keep_results: int = 1000,
        keep_bytes: int = 256 << 20,
        result_ttl_s: float = 3600.0,
    ):
        self.ctx = ctx
        self.workers = workers
        self.queue_size = queue_size
        self.metrics = metrics
        self.keep_results = keep_results
        self.keep_bytes = keep_bytes
        self.result_ttl_s = result_ttl_s
        self.records: dict[str, Record] = {}
        # finished ids, oldest first: (finished at, approximate bytes of the result)
        self._finished: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self.kept_bytes = 0
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox-task")
        self._sem = asyncio.Semaphore(workers)
        self._futs: set[asyncio.Task[None]] = set()
        self.pending = 0
        self.running = 0
        self.draining = False
        self._avg_s = 1.0

    @property
    def queued(self) -> int:
        return self.pending - self.running

    def full(self) -> bool:
        return self.pending >= self.workers + self.queue_size

    def retry_after(self) -> int:
        return int(min(60, max(1, math.ceil(self._avg_s * (self.queued + 1) / self.workers))))

    def submit(self, task: Task) -> Record:
        rec = Record(id=uuid.uuid4().hex, task=task, created=time.monotonic())
        self.records[rec.id] = rec
        self.pending += 1
        fut = asyncio.get_running_loop().create_task(self._run(rec))
        self._futs.add(fut)
        fut.add_done_callback(self._futs.discard)
        self.evict()
        return rec

    def _finish(self, rec: Record, result: TaskResult) -> None:
        rec.result = result
        rec.task = None  # the request (files, patch, tests) is not needed any more
        size = result_bytes(result)
        self._finished[rec.id] = (time.monotonic(), size)
        self.kept_bytes += size
        self.evict()

    def evict(self) -> None:
        """Drop the oldest finished results beyond ``keep_results``, ``keep_bytes`` or
        ``result_ttl_s`` (their ids then answer 404; the newest is kept whatever its size).
        Queued and running tasks are never dropped (they are bounded by the queue)."""
        now = time.monotonic()
        while self._finished:
            rid, (t, size) = next(iter(self._finished.items()))
            over = len(self._finished) > self.keep_results or self.kept_bytes > self.keep_bytes
            # the newest result stays (for its own GET) even when it alone is over the bytes
            if now - t <= self.result_ttl_s and not (over and len(self._finished) > 1):
                break
            del self._finished[rid]
            self.kept_bytes -= size
            self.records.pop(rid, None)

    async def _run(self, rec: Record) -> None:
        result: TaskResult | None = None
        try:
            async with self._sem:
                assert rec.task is not None
                if rec.cancel.is_set():
                    result = TaskResult.infra(
                        "cancelled before it started", rec.id, rec.task.metadata
                    )
                else:
                    rec.state = TaskState.running
                    self.running += 1
                    try:
                        queued_s = time.monotonic() - rec.created
                        loop = asyncio.get_running_loop()
                        task = rec.task
                        result = await loop.run_in_executor(
                            self.pool,
                            lambda: execute(
                                task,
                                self.ctx,
                                task_id=rec.id,
                                cancel=rec.cancel,
                                queued_s=queued_s,
                            ),
                        )
                    finally:
                        self.running -= 1
        except BaseException as e:  # shutdown while queued/running: the client sees infra_error
            meta = rec.task.metadata if rec.task else {}
            result = TaskResult.infra(f"service shutting down: {e!r}", rec.id, meta)
            if not isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self.pending -= 1
            if result is None:
                result = TaskResult.infra(
                    "task lost", rec.id, rec.task.metadata if rec.task else {}
                )
            self._finish(rec, result)
            rec.state = TaskState.cancelled if rec.cancel.is_set() else TaskState.done
            self._avg_s = 0.9 * self._avg_s + 0.1 * max(
                0.01, result.timings.total_s - result.timings.queue_s
            )
            self.metrics.record(
                result.verdict.value, result.timings.total_s, result.timings.queue_s
            )
            rec.done.set()

    def cancel(self, task_id: str) -> bool | None:
        rec = self.records.get(task_id)
        if rec is None:
            return None
        if rec.state in (TaskState.done, TaskState.cancelled):
            return False
        rec.cancel.set()
        return True

    async def wait(self, rec: Record, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rec.done.wait(), timeout)
        return rec.done.is_set()

    async def drain(self, timeout_s: float) -> None:
        """Stop taking work; let what is queued and running finish for up to ``timeout_s``,
        then cancel the rest (their results say ``infra_error``)."""
        self.draining = True
        if self._futs:
            _, left = await asyncio.wait(set(self._futs), timeout=timeout_s)
            for rec in self.records.values():
                if rec.state in (TaskState.queued, TaskState.running):
                    rec.cancel.set()
            if left:
                await asyncio.wait(left, timeout=30)
        self.pool.shutdown(wait=False, cancel_futures=True)


def result_bytes(r: TaskResult) -> int:
    """About what a kept result costs in memory: its output, detail, per-test map, metadata."""
    return (
        1024
        + len(r.stdout)
        + len(r.stderr)
        + len(r.detail)
        + sum(len(k) + 16 for k in r.tests)
        + sum(len(p) for p in r.tamper_paths)
        + (len(json.dumps(r.metadata, default=str)) if r.metadata else 0)
    )
