"""The ``/v1/sessions`` routes: create, exec, put/get a file, finish (evaluate), tty, delete.

Routes are thin: the work is in sessions.py. Each call runs on a thread of its lane (lanes.py:
``long`` for create, exec and finish; ``short`` for files and delete; ``tty`` for keystrokes),
in its session's turn; a saturated lane or session answers 429 with ``Retry-After``.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from dockyard.sandbox.envspec import TtyRequest, TtyResult
from dockyard.sandbox.lanes import Busy, Kind, SessionLanes
from dockyard.sandbox.metrics import Metrics
from dockyard.sandbox.models import (
    ExecRequest,
    ExecResult,
    FinishRequest,
    SessionCreate,
    SessionInfo,
    TaskResult,
)
from dockyard.sandbox.paths import UnsafePath
from dockyard.sandbox.provision import ProvisionFailed
from dockyard.sandbox.repos import RepoError
from dockyard.sandbox.sessions import SessionManager, SessionNotFound, WorkspaceFull

Errors = tuple[type[Exception], ...]


def session_errors(e: BaseException, metrics: Metrics) -> HTTPException:
    """The HTTP error for a session call's failure (anything else is raised again)."""
    if isinstance(e, Busy):
        metrics.rejected("calls_busy")
        return HTTPException(429, str(e), headers={"Retry-After": str(e.retry_after_s)})
    if isinstance(e, SessionNotFound):
        return HTTPException(404, f"no session {e.args[0]} (unknown, deleted or reaped)")
    if isinstance(e, UnsafePath | RepoError | ValueError):
        return HTTPException(422, str(e))
    if isinstance(e, OverflowError):
        metrics.rejected("sessions_full")
        return HTTPException(429, str(e), headers={"Retry-After": "10"})
    raise e


def session_routes(
    sm: Callable[[], SessionManager],
    lanes: SessionLanes,
    auth: Callable[..., None],
    metrics: Metrics,
) -> APIRouter:
    """The router; ``sm`` returns the running service's session manager."""
    router = APIRouter()
    Auth = Annotated[None, Depends(auth)]

    async def call(
        kind: Kind, sid: str | None, fn: Callable[..., Any], *args: Any, errors: Errors = ()
    ) -> Any:
        """``fn(*args)`` on lane ``kind`` in ``sid``'s turn; ``errors`` (and Busy) become
        their HTTP answers (``session_errors``), anything else propagates."""
        try:
            return await lanes.call(kind, sid, fn, *args)
        except (Busy, *errors) as e:
            raise session_errors(e, metrics) from e

    @router.post("/v1/sessions", status_code=201, response_model=SessionInfo)
    async def create_session(spec: SessionCreate, _: Auth) -> SessionInfo:
        try:
            s = await call("long", None, sm().create, spec)
        except ProvisionFailed as e:  # the task's environment, not the service: a 422 + log
            raise HTTPException(422, {"provision_failed": str(e), "log": e.log, "step": e.step,
                                      "exit_code": e.exit_code}) from e  # fmt: skip
        except (UnsafePath, RepoError, ValueError, OverflowError) as e:
            raise session_errors(e, metrics) from e
        return SessionInfo(session_id=s.id, ttl_s=spec.ttl_s)

    @router.post("/v1/sessions/{sid}/exec", response_model=ExecResult)
    async def exec_(sid: str, req: ExecRequest, _: Auth) -> ExecResult:
        r: ExecResult = await call(
            "long", sid, sm().exec, sid, req, errors=(SessionNotFound, UnsafePath)
        )
        metrics.exec_seconds.observe(r.duration_s)
        return r

    @router.put("/v1/sessions/{sid}/files", status_code=204)
    async def put_file(sid: str, request: Request, _: Auth, path: str) -> Response:
        body = await request.body()
        bad = (SessionNotFound, UnsafePath, WorkspaceFull)
        await call("short", sid, sm().put_file, sid, path, body, errors=bad)
        return Response(status_code=204)

    @router.get("/v1/sessions/{sid}/files", response_class=Response)
    async def get_file(sid: str, _: Auth, path: str) -> Response:
        try:
            data = await call("short", sid, sm().get_file, sid, path)
        except (SessionNotFound, UnsafePath, FileNotFoundError) as e:
            if isinstance(e, FileNotFoundError):
                raise HTTPException(404, f"no file {path!r} in the workspace") from e
            raise session_errors(e, metrics) from e
        return Response(content=data, media_type="application/octet-stream")

    @router.post("/v1/sessions/{sid}/finish", response_model=TaskResult)
    async def finish(sid: str, req: FinishRequest, _: Auth) -> TaskResult:
        """Evaluate the workspace's diff in a fresh sandbox with the held-out tests."""
        r: TaskResult = await call(
            "long", sid, sm().finish, sid, req, errors=(SessionNotFound, ValueError)
        )
        metrics.record(r.verdict.value, r.timings.total_s, 0.0)
        return r

    @router.post("/v1/sessions/{sid}/tty", response_model=TtyResult)
    async def tty(sid: str, req: TtyRequest, _: Auth) -> TtyResult:
        """Keystrokes into the session's persistent terminal (a tmux pane in its jail)."""
        r: TtyResult = await call(
            "tty", sid, sm().tty, sid, req, errors=(SessionNotFound, ValueError)
        )
        return r

    @router.delete("/v1/sessions/{sid}", status_code=204)
    async def delete_session(sid: str, _: Auth) -> Response:
        if not await call("short", sid, sm().delete, sid):
            raise HTTPException(404, f"no session {sid}")
        return Response(status_code=204)

    return router
