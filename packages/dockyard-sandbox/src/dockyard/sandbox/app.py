"""The HTTP service (FastAPI). Routes are thin: the work is in tasks.py, sessions.py, executor.py.

Auth: with a token configured, every route except ``/healthz`` and the OpenAPI schema needs
``Authorization: Bearer <token>`` (compared in constant time).
"""

import asyncio
import contextlib
import hmac
import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from dockyard.sandbox import __version__
from dockyard.sandbox.cgroups import probe
from dockyard.sandbox.executor import Context
from dockyard.sandbox.isolation import Isolation, Mode, check_reachable
from dockyard.sandbox.metrics import Metrics
from dockyard.sandbox.models import (
    ExecRequest,
    ExecResult,
    FinishRequest,
    Health,
    SessionCreate,
    SessionInfo,
    Submitted,
    Task,
    TaskResult,
    TaskStatus,
)
from dockyard.sandbox.paths import UnsafePath
from dockyard.sandbox.repos import RepoCache, RepoError
from dockyard.sandbox.sessions import SessionManager, SessionNotFound
from dockyard.sandbox.tasks import TaskManager
from dockyard.sandbox.workspace import UidPool, Workspaces
from dockyard.sandbox.zygote import Zygote
from dockyard.sandbox.zygote import supported as zygote_supported

log = logging.getLogger("dockyard.sandbox")


@dataclass
class ServiceConfig:
    workers: int = 2
    queue_size: int = 256
    token: str | None = None
    cache_dir: Path | None = None
    work_dir: Path | None = None
    allow_network: bool = False
    drain_timeout_s: float = 60.0
    max_sessions: int = 256
    cache_max_bytes: int = 20 << 30
    uid_base: int = 200_000
    isolation: Isolation = field(default_factory=lambda: Isolation(Mode.bwrap))
    zygote: bool = True  # test phases in pre-started interpreters (bwrap, as root; zygote.py)
    extra: dict[str, Any] = field(default_factory=dict)


def _zygote(cfg: ServiceConfig) -> Zygote | None:
    if not cfg.zygote or cfg.isolation.mode != Mode.bwrap:
        return None
    why_not = zygote_supported()
    if why_not:
        log.info("runner zygote off: %s; every test phase starts a fresh interpreter", why_not)
        return None
    return Zygote()


def create_app(cfg: ServiceConfig) -> FastAPI:
    work = cfg.work_dir or Path(tempfile.mkdtemp(prefix="dockyard-sandbox-"))
    work.mkdir(parents=True, exist_ok=True)
    if cfg.isolation.mode == Mode.none:
        check_reachable(work)
    cache_dir = cfg.cache_dir or work / "cache"
    pr = probe()
    workspaces = Workspaces(work / "ws")
    warnings = [w for w in (cfg.isolation.warning, pr.warning, workspaces.warning) if w]
    for w in warnings:
        log.warning(w)
    ctx = Context(
        probe=pr,
        cache=RepoCache(cache_dir, cfg.cache_max_bytes),
        workspaces=workspaces,
        uids=UidPool(cfg.uid_base, 4096),
        trusted_root=workspaces.service_tmpfs(work / "trusted"),
        allow_network=cfg.allow_network,
        isolation=str(cfg.isolation.mode),
        zygote=_zygote(cfg),
    )
    metrics = Metrics()
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["tasks"] = TaskManager(ctx, cfg.workers, cfg.queue_size, metrics)
        state["sessions"] = SessionManager(ctx, cfg.max_sessions)

        async def reaper() -> None:
            while True:
                await asyncio.sleep(1.0)
                await asyncio.to_thread(state["sessions"].reap)

        reap = asyncio.create_task(reaper())
        try:
            yield
        finally:
            reap.cancel()
            await state["tasks"].drain(cfg.drain_timeout_s)
            await asyncio.to_thread(state["sessions"].close)
            if ctx.zygote is not None:
                ctx.zygote.close()
            workspaces.close()

    app = FastAPI(
        title="dockyard-sandbox",
        version=__version__,
        description="Hardened task executor: runs untrusted patches against held-out tests in "
        "bubblewrap jails and returns structured verdicts.",
        lifespan=lifespan,
    )

    def auth(request: Request) -> None:
        if cfg.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.encode(), cfg.token.encode()
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    Auth = Annotated[None, Depends(auth)]

    def tm() -> TaskManager:
        return state["tasks"]

    def sm() -> SessionManager:
        return state["sessions"]

    def _admit() -> TaskManager:
        t = tm()
        if t.draining:
            raise HTTPException(
                503, "service is draining (shutting down)", headers={"Retry-After": "5"}
            )
        if t.full():
            metrics.rejected_429 += 1
            raise HTTPException(429, "queue full", headers={"Retry-After": str(t.retry_after())})
        return t

    @app.post("/v1/tasks", status_code=202, response_model=Submitted)
    async def submit(task: Task, _: Auth) -> Submitted:
        """Queue a task; poll ``/v1/tasks/{id}/result``."""
        return Submitted(task_id=_admit().submit(task).id)

    @app.post("/v1/tasks:run", response_model=TaskResult)
    async def run_task(task: Task, _: Auth) -> TaskResult:
        """Run a task and wait for its result."""
        t = _admit()
        rec = t.submit(task)
        await rec.done.wait()
        assert rec.result is not None
        return rec.result

    @app.get("/v1/tasks/{task_id}", response_model=TaskStatus)
    async def status(task_id: str, _: Auth) -> TaskStatus:
        rec = tm().records.get(task_id)
        if rec is None:
            raise HTTPException(404, f"no task {task_id} (unknown, expired, or lost in a restart)")
        return TaskStatus(
            task_id=task_id, state=rec.state, verdict=rec.result.verdict if rec.result else None
        )

    @app.get(
        "/v1/tasks/{task_id}/result",
        response_model=TaskResult,
        responses={202: {"model": TaskStatus}},
    )
    async def result(
        task_id: str, _: Auth, wait_s: Annotated[float, Query(ge=0, le=300)] = 0.0
    ) -> Any:
        """The result; with ``wait_s`` long-polls. 202 with the state while not done."""
        rec = tm().records.get(task_id)
        if rec is None:
            raise HTTPException(404, f"no task {task_id} (unknown, expired, or lost in a restart)")
        if not await tm().wait(rec, wait_s):
            return JSONResponse(
                TaskStatus(task_id=task_id, state=rec.state).model_dump(mode="json"),
                status_code=202,
            )
        return rec.result

    @app.delete("/v1/tasks/{task_id}")
    async def cancel(task_id: str, _: Auth) -> dict[str, bool]:
        """Cancel a queued or running task (its result becomes ``infra_error: cancelled``)."""
        r = tm().cancel(task_id)
        if r is None:
            raise HTTPException(404, f"no task {task_id}")
        return {"cancelled": r}

    # -- sessions -----------------------------------------------------------------------------
    def _sess_errors(e: Exception) -> HTTPException:
        if isinstance(e, SessionNotFound):
            return HTTPException(404, f"no session {e.args[0]} (unknown, deleted or reaped)")
        if isinstance(e, UnsafePath | RepoError | ValueError):
            return HTTPException(422, str(e))
        if isinstance(e, OverflowError):
            return HTTPException(429, str(e), headers={"Retry-After": "10"})
        raise e

    @app.post("/v1/sessions", status_code=201, response_model=SessionInfo)
    async def create_session(spec: SessionCreate, _: Auth) -> SessionInfo:
        try:
            s = await asyncio.to_thread(sm().create, spec)
        except (UnsafePath, RepoError, ValueError, OverflowError) as e:
            raise _sess_errors(e) from e
        return SessionInfo(session_id=s.id, ttl_s=spec.ttl_s)

    @app.post("/v1/sessions/{sid}/exec", response_model=ExecResult)
    async def exec_(sid: str, req: ExecRequest, _: Auth) -> ExecResult:
        try:
            r = await asyncio.to_thread(sm().exec, sid, req)
        except (SessionNotFound, UnsafePath) as e:
            raise _sess_errors(e) from e
        metrics.exec_seconds.observe(r.duration_s)
        return r

    @app.put("/v1/sessions/{sid}/files", status_code=204)
    async def put_file(sid: str, request: Request, _: Auth, path: str) -> Response:
        body = await request.body()
        try:
            await asyncio.to_thread(sm().put_file, sid, path, body)
        except (SessionNotFound, UnsafePath) as e:
            raise _sess_errors(e) from e
        return Response(status_code=204)

    @app.get("/v1/sessions/{sid}/files", response_class=Response)
    async def get_file(sid: str, _: Auth, path: str) -> Response:
        try:
            data = await asyncio.to_thread(sm().get_file, sid, path)
        except (SessionNotFound, UnsafePath, FileNotFoundError) as e:
            if isinstance(e, FileNotFoundError):
                raise HTTPException(404, f"no file {path!r} in the workspace") from e
            raise _sess_errors(e) from e
        return Response(content=data, media_type="application/octet-stream")

    @app.post("/v1/sessions/{sid}/finish", response_model=TaskResult)
    async def finish(sid: str, req: FinishRequest, _: Auth) -> TaskResult:
        """Evaluate the workspace's diff in a fresh sandbox with the held-out tests."""
        try:
            r = await asyncio.to_thread(sm().finish, sid, req)
        except SessionNotFound as e:
            raise _sess_errors(e) from e
        metrics.record(r.verdict.value, r.timings.total_s, 0.0)
        return r

    @app.delete("/v1/sessions/{sid}", status_code=204)
    async def delete_session(sid: str, _: Auth) -> Response:
        if not await asyncio.to_thread(sm().delete, sid):
            raise HTTPException(404, f"no session {sid}")
        return Response(status_code=204)

    # -- service ------------------------------------------------------------------------------
    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        t = tm()
        return Health(
            status="draining" if t.draining else "ok",
            version=__version__,
            workers=t.workers,
            running=t.running,
            queued=t.queued,
            isolation={
                "mode": str(cfg.isolation.mode),
                "cgroups": ctx.probe.describe(),
                "workspace_tmpfs": ctx.workspaces.tmpfs,
                "runner_zygote": ctx.zygote is not None,
                "warnings": warnings,
            },
        )

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_(_: Auth) -> str:
        t = tm()
        return metrics.render(
            {
                "queue_depth": t.queued,
                "running": t.running,
                "workers": t.workers,
                "sessions": len(sm().sessions),
                "cache_hits": ctx.cache.hits,
                "cache_misses": ctx.cache.misses,
            }
        )

    return app
