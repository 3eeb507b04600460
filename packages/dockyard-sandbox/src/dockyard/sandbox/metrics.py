"""Prometheus metrics of the service (``GET /metrics``), on ``prometheus_client``.

Every app has its own :class:`~prometheus_client.CollectorRegistry` (never the process-global
one: several apps may live in one process, in tests). Served with
``generate_latest(metrics.registry)``, media type ``CONTENT_TYPE_LATEST``.

* counters: ``dockyard_sandbox_verdicts_total{verdict}``,
  ``dockyard_sandbox_rejected_total{reason}`` (``queue_full``, ``too_large``, ``sessions_full``,
  ``draining``, ``calls_busy``: a session call refused by a saturated lane or session), ``dockyard_sandbox_cache_hits_total`` / ``dockyard_sandbox_cache_misses_total``
  (the repository cache, read at scrape time);
* gauges, read at scrape time: ``dockyard_sandbox_queue_depth``, ``dockyard_sandbox_running``,
  ``dockyard_sandbox_workers``, ``dockyard_sandbox_sessions``, and per session lane (lanes.py:
  ``long``, ``short``, ``tty``) ``dockyard_sandbox_session_call_threads{lane}``,
  ``dockyard_sandbox_session_calls_running{lane}``, ``dockyard_sandbox_session_calls_waiting{lane}``;
* histograms (seconds): ``dockyard_sandbox_task_seconds`` (submit to result),
  ``dockyard_sandbox_queue_seconds`` (submit to start), ``dockyard_sandbox_session_exec_seconds``
  (one session exec).

No label carries a host path (verdicts, reasons and lane names are fixed sets). Without
prometheus_client's ``*_created`` series (text format 0.0.4 shows them as extra gauges;
turning them off there is process-wide, so they are left out here instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dockyard.sandbox.models import Verdict

PREFIX = "dockyard_sandbox"
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))
# Reasons a request is turned away; exported at 0 from the start so that rate() sees them.
REJECT_REASONS = ("queue_full", "too_large", "sessions_full", "draining", "calls_busy")
# Per lane (lanes.py): (metric suffix, help, key of the lane's stats)
LANE_GAUGES = (
    ("session_call_threads", "Threads of the session-call lane.", "threads"),
    ("session_calls_running", "Session calls running on the lane's threads.", "running"),
    ("session_calls_waiting", "Session calls waiting for a thread of the lane.", "waiting"),
)


@dataclass(frozen=True)
class Live:
    """The service's state read at scrape time (see :attr:`Metrics.live`)."""

    queue_depth: int
    running: int
    workers: int
    sessions: int
    cache_hits: int
    cache_misses: int
    lanes: dict[str, dict[str, int]] = field(default_factory=dict)  # lanes.py stats, by lane


class _Collector(Collector):
    """The app's metrics (less ``*_created``), then the state read at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        for metric in (m.verdicts, m.rejections, m.task_seconds, m.queue_seconds, m.exec_seconds):
            for family in metric.collect():
                created = family.name + "_created"
                family.samples = [s for s in family.samples if s.name != created]
                yield family
        live = m.live() if m.live is not None else None
        if live is None:  # before the app's startup: nothing to read yet
            return
        for name, doc, value in (
            ("queue_depth", "Tasks accepted and waiting for a worker.", live.queue_depth),
            ("running", "Tasks running now.", live.running),
            ("workers", "Task workers (concurrent tasks at most).", live.workers),
            ("sessions", "Live sessions (created, not yet deleted or reaped).", live.sessions),
        ):
            yield GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)
        for name, doc, value in (
            ("cache_hits", "Repository cache look-ups served from the cache.", live.cache_hits),
            (
                "cache_misses",
                "Repository cache look-ups that built the tree anew.",
                live.cache_misses,
            ),
        ):
            yield CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)
        for name, doc, key in LANE_GAUGES:
            g = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["lane"])
            for lane, stats in live.lanes.items():
                g.add_metric([lane], stats[key])
            yield g


class Metrics:
    """The service's metrics, in a registry of their own (:attr:`registry`).

    ``live`` is set by the app to a function returning a :class:`Live` (or ``None`` while
    there is nothing to read); it is called on every scrape.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.live: Callable[[], Live | None] | None = None
        self.verdicts = Counter(
            f"{PREFIX}_verdicts",
            "Task and session-finish results, by verdict.",
            ["verdict"],
            registry=None,
        )
        self.rejections = Counter(
            f"{PREFIX}_rejected",
            "Requests turned away, by reason (queue_full and sessions_full are 429s).",
            ["reason"],
            registry=None,
        )
        self.task_seconds = Histogram(
            f"{PREFIX}_task_seconds",
            "Task latency, submit to result (seconds).",
            buckets=BUCKETS,
            registry=None,
        )
        self.queue_seconds = Histogram(
            f"{PREFIX}_queue_seconds",
            "Time a task waited in the queue for a worker (seconds).",
            buckets=BUCKETS,
            registry=None,
        )
        self.exec_seconds = Histogram(
            f"{PREFIX}_session_exec_seconds",
            "Duration of one session exec (seconds).",
            buckets=BUCKETS,
            registry=None,
        )
        for v in Verdict:
            self.verdicts.labels(verdict=v.value)
        for reason in REJECT_REASONS:
            self.rejections.labels(reason=reason)
        self.registry.register(_Collector(self))

    def record(self, verdict: str, total_s: float, queue_s: float) -> None:
        """One result: its verdict and latencies."""
        self.verdicts.labels(verdict=verdict).inc()
        self.task_seconds.observe(total_s)
        self.queue_seconds.observe(queue_s)

    def rejected(self, reason: str) -> None:
        """One request turned away (``queue_full``, ``too_large``, ...)."""
        self.rejections.labels(reason=reason).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of :attr:`registry`."""
        return generate_latest(self.registry)
