"""Prometheus text exposition for the service (no client library needed)."""

from __future__ import annotations

import threading
from collections import Counter

_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.sum = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.sum += v
        self.n += 1
        for i, b in enumerate(_BUCKETS):
            if v <= b:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        for b, c in zip(_BUCKETS, self.counts, strict=True):
            le = "+Inf" if b == float("inf") else repr(b)
            out.append(f'{name}_bucket{{le="{le}"}} {c}')
        out += [f"{name}_sum {self.sum}", f"{name}_count {self.n}"]
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.verdicts: Counter[str] = Counter()
        self.task_seconds = Histogram()
        self.queue_seconds = Histogram()
        self.exec_seconds = Histogram()
        self.rejected_429 = 0

    def record(self, verdict: str, total_s: float, queue_s: float) -> None:
        with self._lock:
            self.verdicts[verdict] += 1
            self.task_seconds.observe(total_s)
            self.queue_seconds.observe(queue_s)

    def render(self, gauges: dict[str, float]) -> str:
        with self._lock:
            lines = []
            for name, v in gauges.items():
                lines += [f"# TYPE dockyard_sandbox_{name} gauge", f"dockyard_sandbox_{name} {v}"]
            lines.append("# TYPE dockyard_sandbox_verdicts_total counter")
            for verdict, n in sorted(self.verdicts.items()):
                lines.append(f'dockyard_sandbox_verdicts_total{{verdict="{verdict}"}} {n}')
            lines += [
                "# TYPE dockyard_sandbox_rejected_total counter",
                f"dockyard_sandbox_rejected_total {self.rejected_429}",
            ]
            lines += self.task_seconds.lines("dockyard_sandbox_task_seconds")
            lines += self.queue_seconds.lines("dockyard_sandbox_queue_seconds")
            lines += self.exec_seconds.lines("dockyard_sandbox_session_exec_seconds")
            return "\n".join(lines) + "\n"
