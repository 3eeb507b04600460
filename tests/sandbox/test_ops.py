"""The ops surface of a real service: ``/metrics`` (Prometheus exposition: HELP and TYPE of every
family, verdict and repository-cache counters that move by exactly what was run) and ``/docs``
/ ``/redoc`` (served with no URL off the host: the service runs on air-gapped nodes; no token
needed, like the schema)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import RepoSpec, Verdict
from dockyard.sandbox.testing import CALC_REPO, calc_task, make_tarball

P = "dockyard_sandbox"


@pytest.fixture(scope="module")
def sandbox_service() -> Iterator[ServiceHandle]:
    """This module's service has a token: /metrics needs it, the docs pages do not."""
    with start_service(workers=2, generate_token=True) as svc:
        assert svc.token
        yield svc


def _auth(svc: ServiceHandle) -> dict[str, str]:
    return {"Authorization": f"Bearer {svc.token}"}


def _scrape(svc: ServiceHandle) -> httpx.Response:
    r = httpx.get(f"{svc.url}/metrics", headers=_auth(svc), timeout=30)
    assert r.status_code == 200, r.text
    return r


def _samples(svc: ServiceHandle) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(_scrape(svc).text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _verdict(samples: dict, verdict: str) -> float:
    return samples[(f"{P}_verdicts_total", (("verdict", verdict),))]


def test_metrics_is_prometheus_text_with_help_and_types(sandbox_service: ServiceHandle) -> None:
    assert httpx.get(f"{sandbox_service.url}/metrics", timeout=30).status_code == 401
    r = _scrape(sandbox_service)
    assert r.headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    assert r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    expected = {
        f"{P}_verdicts": "counter",
        f"{P}_rejected": "counter",
        f"{P}_cache_hits": "counter",
        f"{P}_cache_misses": "counter",
        f"{P}_queue_depth": "gauge",
        f"{P}_running": "gauge",
        f"{P}_workers": "gauge",
        f"{P}_sessions": "gauge",
        f"{P}_task_seconds": "histogram",
        f"{P}_queue_seconds": "histogram",
        f"{P}_session_exec_seconds": "histogram",
        f"{P}_session_call_threads": "gauge",  # per lane (lanes.py)
        f"{P}_session_calls_running": "gauge",
        f"{P}_session_calls_waiting": "gauge",
    }
    assert {n: families[n].type for n in expected if n in families} == expected
    assert set(families) == set(expected)  # nothing else (no *_created gauges)
    for name, family in families.items():
        assert family.documentation.strip(), f"{name} has no HELP text"
        assert family.samples, name
    # the raw text: one HELP and one TYPE line per family, before every sample of it
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line in r.text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
        elif line:
            sample = line.split("{")[0].split(" ")[0]
            family = next((n for n in (sample, *(sample.rsplit("_", 1)[:1])) if n in types), None)
            assert family is not None, f"{sample} has no TYPE line before it"
            assert helps.get(family), f"{family} has no HELP line"
    assert set(helps) == set(types)
    assert types[f"{P}_verdicts_total"] == "counter"
    assert types[f"{P}_cache_hits_total"] == "counter"
    assert types[f"{P}_task_seconds"] == "histogram"
    # counters end in _total; every verdict and every reject reason is there from the start
    assert {s.name for s in families[f"{P}_cache_hits"].samples} == {f"{P}_cache_hits_total"}
    assert {s.labels["verdict"] for s in families[f"{P}_verdicts"].samples} == {
        v.value for v in Verdict
    }
    reasons = {s.labels["reason"] for s in families[f"{P}_rejected"].samples}
    assert {"queue_full", "too_large"} <= reasons
    assert families[f"{P}_workers"].samples[0].value == 2
    buckets = [
        s for s in families[f"{P}_task_seconds"].samples if s.name == f"{P}_task_seconds_bucket"
    ]
    assert buckets[-1].labels["le"] == "+Inf"


def test_verdict_and_cache_counters_count_what_ran(
    sandbox: SandboxClient, sandbox_service: ServiceHandle
) -> None:
    # A repository no other test has sent (a nonce file), as one tarball sent twice: a tarball
    # made anew can differ by its timestamps.
    repo = RepoSpec.model_validate(
        {"tarball": make_tarball({**CALC_REPO, "nonce.txt": uuid.uuid4().hex})}
    )
    task = calc_task(repo=repo)
    hits, misses = f"{P}_cache_hits_total", f"{P}_cache_misses_total"
    count = f"{P}_task_seconds_count"

    before = _samples(sandbox_service)
    assert sandbox.run_task(task).verdict == Verdict.passed
    first = _samples(sandbox_service)
    assert _verdict(first, "passed") == _verdict(before, "passed") + 1
    assert first[(misses, ())] == before[(misses, ())] + 1  # new repository: a miss
    assert first[(hits, ())] == before[(hits, ())]

    assert sandbox.run_task(task).verdict == Verdict.passed
    second = _samples(sandbox_service)
    assert _verdict(second, "passed") == _verdict(before, "passed") + 2
    assert second[(hits, ())] == first[(hits, ())] + 1  # the same repository again: a hit
    assert second[(misses, ())] == first[(misses, ())]
    assert second[(count, ())] == before[(count, ())] + 2
    for v in Verdict:
        if v != Verdict.passed:
            assert _verdict(second, v.value) == _verdict(before, v.value), v


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(str(a["src"]))
        if tag == "link" and a.get("href"):
            self.links.append(str(a["href"]))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_nothing_off_the_host(sandbox_service: ServiceHandle, page: str) -> None:
    base = sandbox_service.url
    r = httpx.get(f"{base}{page}", timeout=30)  # no token: like /openapi.json
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "http://" not in html
    assert "https://" not in html
    assert "//cdn" not in html
    found = _Assets()
    found.feed(html)
    assert found.scripts, html  # the UI's bundle
    if page == "/docs":
        assert any(u.endswith(".css") for u in found.links), html
    for url in found.scripts + found.links:
        parts = urlsplit(url)
        assert not parts.scheme, url  # relative: on this service
        assert not parts.netloc, url
        full = urljoin(f"{base}{page}", url)
        assert urlsplit(full).netloc == urlsplit(base).netloc
        a = httpx.get(full, timeout=30)
        assert a.status_code == 200, (url, a.status_code)
        assert len(a.content) > (100_000 if url.endswith((".js", ".css")) else 500), url
        if url.endswith(".js"):
            assert "javascript" in a.headers["content-type"]
    assert httpx.get(f"{base}/openapi.json", timeout=30).json()["paths"]["/metrics"]
