"""The HTTP service (FastAPI). Routes are thin: the work is in tasks.py, sessions.py, executor.py.

:func:`create_app` builds the service's shared state (:class:`_Service`: the work dir, cgroups
probe, repo cache, workspaces, runner zygote and the session routes' lanes), its lifespan (the
task and session managers, the reaper, the ordered shutdown) and its route groups: tasks,
sessions (sessionroutes.py, on the bounded lanes of lanes.py), service (health and metrics),
each an :class:`~fastapi.APIRouter` built by a small function, and the local docs.

Auth: with a token configured, every route except ``/healthz``, the OpenAPI schema and its
pages (``/docs``, ``/redoc``, their assets under ``/docs/static``) needs
``Authorization: Bearer <token>`` (compared in constant time). ``/healthz`` alone says only
``status`` and ``version`` (nothing about the host: load balancers and probes call it
unauthenticated); ``/healthz?detail=1`` adds the load, the isolation in force (cgroup paths,
warnings) and the lanes, and needs the token.
"""

import asyncio
import atexit
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import fastapi_offline
import prometheus_client
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from dockyard.sandbox import __version__
from dockyard.sandbox.bodylimit import MaxBodySize
from dockyard.sandbox.cgroups import probe
from dockyard.sandbox.desktop.routes import desktop_router
from dockyard.sandbox.executor import Context
from dockyard.sandbox.isolation import Isolation, Mode, check_reachable
from dockyard.sandbox.lanes import LaneSizes, SessionLanes
from dockyard.sandbox.lifecycle import WorkDir
from dockyard.sandbox.metrics import Live, Metrics
from dockyard.sandbox.models import Health, Submitted, Task, TaskResult, TaskStatus
from dockyard.sandbox.provision import Provisioner
from dockyard.sandbox.repos import RepoCache, SourcePolicy, SourceRefused
from dockyard.sandbox.sessionroutes import session_routes
from dockyard.sandbox.sessions import SessionManager
from dockyard.sandbox.tasks import TaskManager
from dockyard.sandbox.workspace import UidPool, Workspaces
from dockyard.sandbox.zygote import Zygote
from dockyard.sandbox.zygote import supported as zygote_supported

log = logging.getLogger("dockyard.sandbox")

# swagger-ui / redoc assets shipped in the fastapi-offline wheel: /docs needs no CDN
_DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"


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
    warm_containers: int = 4  # container sessions started ahead, per kind (warmpool.py)
    cache_max_bytes: int = 20 << 30
    uid_base: int = 200_000
    isolation: Isolation = field(default_factory=lambda: Isolation(Mode.bwrap))
    zygote: bool = True  # test phases in pre-started interpreters (bwrap, as root; zygote.py)
    # where repo.path and server-path repo.git may lie; URL schemes repo.git may use (repos.py)
    repo_roots: list[Path] = field(default_factory=list)
    git_schemes: list[str] = field(default_factory=list)
    # extra hosts provisioning jails may reach besides apt sources and PyPI (egress.py)
    registries: list[str] = field(default_factory=list)
    max_request_bytes: int = 64 << 20  # larger request bodies get 413 before they are read
    keep_results: int = 1000  # finished results kept for GET .../result: at most this many,
    keep_results_bytes: int = 256 << 20  # ... holding at most this much output,
    result_ttl_s: float = 3600.0  # ... for at most this long
    extra: dict[str, Any] = field(default_factory=dict)
    # provisioned environments (provision.py); None: <work dir>/envs, gone at shutdown
    env_cache_dir: Path | None = None
    # threads for long session calls (create, exec, finish); None: max(4, 2 * workers) (lanes.py)
    session_long_calls: int | None = None
    layer_cache_max_bytes: int = 20 << 30  # layered images (layers/store.py): LRU past this


def create_app(cfg: ServiceConfig) -> FastAPI:
    svc = _Service.start(cfg)
    app = FastAPI(
        title="dockyard-sandbox",
        version=__version__,
        description="Hardened task executor: runs untrusted patches against held-out tests in "
        "bubblewrap jails and returns structured verdicts.",
        lifespan=svc.lifespan,
        docs_url=None,  # served by _add_docs from local assets (the default page loads a CDN)
        redoc_url=None,
    )
    app.add_middleware(
        MaxBodySize,  # type: ignore[arg-type]
        max_bytes=cfg.max_request_bytes,
        on_reject=lambda: svc.metrics.rejected("too_large"),
    )
    app.include_router(_task_routes(svc))
    app.include_router(session_routes(svc.sm, svc.lanes, svc.auth, svc.metrics))
    app.include_router(desktop_router(svc.sm, svc.lanes, svc.auth))
    app.include_router(_service_routes(svc))
    _add_docs(app)
    return app


# -- the service's state ------------------------------------------------------------------------
def _zygote(cfg: ServiceConfig) -> Zygote | None:
    if not cfg.zygote or cfg.isolation.mode != Mode.bwrap:
        return None
    why_not = zygote_supported()
    if why_not:
        log.info("runner zygote off: %s; every test phase starts a fresh interpreter", why_not)
        return None
    return Zygote()


async def _quietly(what: str, fn: Any, *args: Any) -> None:
    """Await ``fn(*args)`` at shutdown: an exception is logged, not raised."""
    try:
        await fn(*args)
    except Exception:
        log.exception("shutdown: %s failed", what)


@dataclass(eq=False)
class _Service:
    """What the routes share. ``tasks`` and ``sessions`` exist while the app runs (lifespan)."""

    cfg: ServiceConfig
    owner: WorkDir
    ctx: Context
    warnings: list[str]
    metrics: Metrics
    lanes: SessionLanes
    tasks: TaskManager | None = None
    sessions: SessionManager | None = None

    @classmethod
    def start(cls, cfg: ServiceConfig) -> "_Service":
        """Claim the work dir, probe the cgroups, set up workspaces, cache and zygote."""
        lanes = SessionLanes(LaneSizes.for_workers(cfg.workers, cfg.session_long_calls))
        # The work dir is locked for this process and what a killed service left there reclaimed
        # (WorkDirInUse if a live one holds it); WorkDir.close removes it all again (lifecycle.py).
        owner = WorkDir.claim(cfg.work_dir, cfg.cache_dir)
        atexit.register(owner.close)  # a start that fails below; a no-op after the lifespan's
        try:
            work, cache_dir = owner.path, owner.cache_dir
            if cfg.isolation.mode == Mode.none:
                check_reachable(work)
            pr = probe()
            owner.record_cgroups([c.base for c in pr.controllers.values()])
            workspaces = Workspaces(work / "ws")
        except BaseException:
            owner.close()
            raise
        warnings = [w for w in (cfg.isolation.warning, pr.warning, workspaces.warning) if w]
        for w in warnings:
            log.warning(w)
        ctx = Context(
            probe=pr,
            cache=RepoCache(
                cache_dir,
                cfg.cache_max_bytes,
                SourcePolicy(tuple(map(str, cfg.repo_roots)), frozenset(cfg.git_schemes)),
            ),
            workspaces=workspaces,
            uids=UidPool(cfg.uid_base, 4096),
            trusted_root=workspaces.service_tmpfs(work / "trusted"),
            allow_network=cfg.allow_network,
            registries=tuple(cfg.registries),
            isolation=str(cfg.isolation.mode),
            zygote=_zygote(cfg),
        )
        svc = cls(cfg, owner, ctx, warnings, Metrics(), lanes)
        svc.metrics.live = svc.live
        return svc

    async def auth(self, request: Request) -> None:
        """The dependency of every protected route: 401 unless ``Bearer <token>`` (if set).
        A coroutine: a plain function would be run on a thread of the server's pool for every
        request (FastAPI's rule for sync dependencies), ~0.3-1 ms of hand-offs each."""
        token = self.cfg.token
        if token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    def tm(self) -> TaskManager:
        if self.tasks is None:
            raise RuntimeError("the service is not running (outside its lifespan)")
        return self.tasks

    def sm(self) -> SessionManager:
        if self.sessions is None:
            raise RuntimeError("the service is not running (outside its lifespan)")
        return self.sessions

    def live(self) -> Live | None:
        """The gauges read at scrape time (None before the lifespan starts the managers)."""
        t, ss = self.tasks, self.sessions
        if t is None or ss is None:
            return None
        return Live(
            queue_depth=t.queued,
            running=t.running,
            workers=t.workers,
            sessions=len(ss.sessions),
            cache_hits=self.ctx.cache.hits,
            cache_misses=self.ctx.cache.misses,
            lanes=self.lanes.stats(),
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        """Start the managers and the reaper; on the way out drain, close, then release all."""
        cfg, ctx = self.cfg, self.ctx
        tasks = self.tasks = TaskManager(
            ctx,
            cfg.workers,
            cfg.queue_size,
            self.metrics,
            keep_results=max(1, cfg.keep_results),
            keep_bytes=cfg.keep_results_bytes,
            result_ttl_s=cfg.result_ttl_s,
        )
        sessions = self.sessions = SessionManager(ctx, cfg.max_sessions, cfg.warm_containers)
        sessions.provisioner = Provisioner(
            cfg.env_cache_dir or self.owner.env_cache, ctx, cfg.layer_cache_max_bytes
        )
        ctx.provisioner = sessions.provisioner  # one cache for tasks and sessions

        async def reaper() -> None:  # on a thread of its own, never behind a client (lanes.py)
            while True:
                await asyncio.sleep(1.0)
                tasks.evict()  # results past their time
                try:
                    await self.lanes.reap(sessions)
                except Exception:
                    log.exception("reaping idle sessions failed; retrying in 1 s")

        reap = asyncio.create_task(reaper())
        try:
            yield
        finally:
            reap.cancel()
            try:  # each step logs its failure and the next still runs
                await _quietly("draining the tasks", tasks.drain, cfg.drain_timeout_s)
                self.lanes.close()
                await _quietly("closing the sessions", asyncio.to_thread, sessions.close)
                if ctx.zygote is not None:
                    await _quietly(
                        "stopping the runner zygote", asyncio.to_thread, ctx.zygote.close
                    )
                await _quietly(
                    "unmounting the trusted tmpfs", asyncio.to_thread, ctx.workspaces.close
                )
                await _quietly(  # layered images (layers/store.py); the layers stay cached
                    "unmounting the images", asyncio.to_thread, sessions.provisioner.close
                )
            finally:  # cgroups, mounts, work dir, lock (never raises)
                await asyncio.to_thread(self.owner.close)


# -- routes -------------------------------------------------------------------------------------
def _admit(svc: _Service) -> TaskManager:
    """The task manager, when it takes one more task: 503 while draining, 429 when full."""
    t = svc.tm()
    if t.draining:
        svc.metrics.rejected("draining")
        raise HTTPException(
            503, "service is draining (shutting down)", headers={"Retry-After": "5"}
        )
    if t.full():
        svc.metrics.rejected("queue_full")
        raise HTTPException(429, "queue full", headers={"Retry-After": str(t.retry_after())})
    return t


def _allowed(svc: _Service, task: Task) -> Task:
    """422 for what the operator does not allow (a host source, a network), before the task is
    queued."""
    try:
        svc.ctx.cache.policy.check(task.repo)
    except SourceRefused as e:
        raise HTTPException(422, str(e)) from e
    if task.network and not svc.cfg.allow_network:
        raise HTTPException(
            422, "network: the task asks for a network; the service runs without --allow-network"
        )
    if task.environment is not None and task.environment.network and not svc.cfg.allow_network:
        raise HTTPException(
            422,
            "environment.network: provisioning steps that download packages need the "
            "service to run with --allow-network",
        )
    return task


def _task_routes(svc: _Service) -> APIRouter:
    """``/v1/tasks``: submit, run and wait, status, result (long-poll), cancel; admission by
    :func:`_admit` and :func:`_allowed`."""
    cfg = svc.cfg
    router = APIRouter()
    Auth = Annotated[None, Depends(svc.auth)]
    window = (
        f"the newest {cfg.keep_results} finished results, at most "
        f"{cfg.keep_results_bytes >> 20} MiB of them, are kept for {cfg.result_ttl_s:g} s"
    )

    @router.post("/v1/tasks", status_code=202, response_model=Submitted)
    async def submit(task: Task, _: Auth) -> Submitted:
        """Queue a task; poll ``/v1/tasks/{id}/result``."""
        return Submitted(task_id=_admit(svc).submit(_allowed(svc, task)).id)

    @router.post("/v1/tasks:run", response_model=TaskResult)
    async def run_task(task: Task, _: Auth) -> TaskResult:
        """Run a task and wait for its result."""
        t = _admit(svc)
        rec = t.submit(_allowed(svc, task))
        await rec.done.wait()
        assert rec.result is not None
        return rec.result

    @router.get("/v1/tasks/{task_id}", response_model=TaskStatus)
    async def status(task_id: str, _: Auth) -> TaskStatus:
        rec = svc.tm().records.get(task_id)
        if rec is None:
            raise HTTPException(
                404, f"no task {task_id} (unknown, expired or lost in a restart: {window})"
            )
        return TaskStatus(
            task_id=task_id, state=rec.state, verdict=rec.result.verdict if rec.result else None
        )

    @router.get(
        "/v1/tasks/{task_id}/result",
        response_model=TaskResult,
        responses={202: {"model": TaskStatus}},
    )
    async def result(
        task_id: str, _: Auth, wait_s: Annotated[float, Query(ge=0, le=300)] = 0.0
    ) -> Any:
        """The result; with ``wait_s`` long-polls. 202 with the state while not done."""
        rec = svc.tm().records.get(task_id)
        if rec is None:
            raise HTTPException(
                404, f"no task {task_id} (unknown, expired or lost in a restart: {window})"
            )
        if not await svc.tm().wait(rec, wait_s):
            return JSONResponse(
                TaskStatus(task_id=task_id, state=rec.state).model_dump(mode="json"),
                status_code=202,
            )
        return rec.result

    @router.delete("/v1/tasks/{task_id}")
    async def cancel(task_id: str, _: Auth) -> dict[str, bool]:
        """Cancel a queued or running task (its result becomes ``infra_error: cancelled``)."""
        r = svc.tm().cancel(task_id)
        if r is None:
            raise HTTPException(404, f"no task {task_id}")
        return {"cancelled": r}

    return router


def _service_routes(svc: _Service) -> APIRouter:
    """``/healthz`` (no auth: probes; the detail needs the token) and ``/metrics``."""
    router = APIRouter()
    Auth = Annotated[None, Depends(svc.auth)]

    @router.get("/healthz", response_model=Health, response_model_exclude_none=True)
    async def healthz(
        request: Request,
        detail: Annotated[
            bool,
            Query(
                description="Add the load, the isolation in force (host cgroup paths, "
                "warnings) and the session lanes; needs the token when one is configured."
            ),
        ] = False,
    ) -> Health:
        """``status`` and ``version`` only (no auth; nothing about the host); more with
        ``detail=1`` (auth)."""
        t, ctx = svc.tm(), svc.ctx
        status = "draining" if t.draining else "ok"
        if not detail:
            return Health(status=status, version=__version__)
        await svc.auth(request)
        return Health(
            status=status,
            version=__version__,
            session_calls=svc.lanes.stats(),
            workers=t.workers,
            running=t.running,
            queued=t.queued,
            isolation={
                "mode": str(svc.cfg.isolation.mode),
                "cgroups": ctx.probe.describe(),
                "workspace_tmpfs": ctx.workspaces.tmpfs,
                "runner_zygote": ctx.zygote is not None,
                "warnings": svc.warnings,
            },
        )

    @router.get("/v1/environments/stats")
    async def environment_stats(_: Auth) -> dict[str, int]:
        """Provisioned environments and the layer cache: counts, bytes, evictions; the warm
        containers (ready, and how many session starts found one: hits / misses)."""
        sm = svc.sm()
        prov = await asyncio.to_thread(sm.provisioner.stats) if sm.provisioner else {}
        return prov | sm.warm.stats()

    @router.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {
                "content": {prometheus_client.CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}
            }
        },
    )
    async def metrics_(_: Auth) -> Response:
        """Prometheus text exposition: verdicts, rejections, cache, queue, latencies."""
        return Response(
            prometheus_client.generate_latest(svc.metrics.registry),
            media_type=prometheus_client.CONTENT_TYPE_LATEST,
        )

    return router


def _add_docs(app: FastAPI) -> None:
    """Swagger UI and ReDoc from local assets (air-gapped nodes), no auth."""
    app.mount("/docs/static", StaticFiles(directory=_DOCS_ASSETS), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}/docs/static/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/static/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/static/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # no badge from validator.swagger.io
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}/docs/static/redoc.standalone.js",
            redoc_favicon_url=f"{root}/docs/static/favicon.png",
            with_google_fonts=False,
        )
