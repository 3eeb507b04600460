"""The ``dockyard view`` web server: a read-only JSON API over the runs' logs, and the page.

FastAPI + uvicorn, the stack the sandbox service already uses. The page (``static/``) and its
libraries (``static/vendor/``, see ``VENDOR.md``) are served from this package: nothing is
fetched from elsewhere, so it works on an air-gapped node and through an SSH tunnel
(``ssh -L 8765:127.0.0.1:8765 node``). Every response carries a Content-Security-Policy that
allows scripts from this server only (defence in depth: the page itself renders every
trajectory text as text, never as HTML).

API (``rid``: a run's index in ``/api/runs``; ``key``: one of its step keys)::

    GET /api/runs                              runs, their step keys, live or not
    GET /api/runs/{rid}/metrics                rows of metrics.jsonl
    GET /api/runs/{rid}/steps/{key}            episode summaries (filters: see data.matches)
    GET /api/runs/{rid}/steps/{key}/{row}      one episode, every column
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from dockyard.train.view.data import Run, TableCache, find_runs, matches, read_metrics

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'none'"
)


def create_app(folders: list[str | Path]) -> FastAPI:
    """The viewer's app over the runs found under ``folders`` (looked for again on each
    ``/api/runs``, so a run started later appears)."""
    app = FastAPI(title="dockyard view", docs_url=None, redoc_url=None, openapi_url=None)
    cache = TableCache()
    runs: list[Run] = find_runs(folders)

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def run_of(rid: int) -> Run:
        if not 0 <= rid < len(runs):
            raise HTTPException(404, f"no run {rid}")
        return runs[rid]

    def file_of(rid: int, key: str) -> Path:
        try:
            return run_of(rid).file(key)
        except KeyError:
            raise HTTPException(404, f"run {rid} has no step {key!r}") from None

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/runs")
    def list_runs() -> list[dict[str, Any]]:
        nonlocal runs
        with contextlib.suppress(ValueError):  # a folder went away: keep what was found
            runs = find_runs(folders)
        return [r.info() for r in runs]

    @app.get("/api/runs/{rid}/metrics")
    def metrics(rid: int) -> list[dict[str, Any]]:
        return clean(read_metrics(run_of(rid)))

    @app.get("/api/runs/{rid}/steps/{key}")
    def episodes(
        rid: int,
        key: str,
        verdict: str = "",
        env: str = "",
        flag: str = "",
        infra: str = "",
        task_id: str = "",
        q: str = "",
        min_reward: float | None = None,
        max_reward: float | None = None,
    ) -> list[dict[str, Any]]:
        path = file_of(rid, key)
        rows = cache.rows(path, "summary")
        texts = cache.rows(path, "search") if q else [None] * len(rows)
        f = {"verdict": verdict, "env": env, "flag": flag, "infra": infra, "task_id": task_id,
             "q": q, "min_reward": min_reward, "max_reward": max_reward}  # fmt: skip
        return clean([r for r, t in zip(rows, texts, strict=True) if matches(r, t, f)])

    @app.get("/api/runs/{rid}/steps/{key}/{row}")
    def episode(rid: int, key: str, row: int) -> dict[str, Any]:
        rows = cache.rows(file_of(rid, key), "full")
        if not 0 <= row < len(rows):
            raise HTTPException(404, f"no episode {row} in {key}")
        return clean(rows[row])

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def clean(obj: Any) -> Any:
    """``obj`` with non-finite floats as None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, list):
        return [clean(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    return obj


def check_host(host: str, allow_remote: bool) -> None:
    """ValueError unless ``host`` is a loopback address (or ``allow_remote``): the viewer shows
    a run's trajectories and prompts to whoever can reach it."""
    if allow_remote:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"--host {host}: not a loopback address, so anyone who reaches this machine could "
            "read the runs; reach it through an SSH tunnel (ssh -L 8765:127.0.0.1:8765 HOST), "
            "or pass --allow-remote to serve beyond loopback anyway"
        )


def serve(folders: list[str | Path], host: str, port: int, allow_remote: bool = False) -> None:
    """Serve the viewer on ``host:port`` until interrupted (:func:`check_host` first)."""
    check_host(host, allow_remote)
    app = create_app(folders)
    uvicorn.run(app, host=host, port=port, log_level="warning")
