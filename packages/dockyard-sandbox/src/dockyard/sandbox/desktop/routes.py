"""The desktop routes of a session: start, step (act + observe), stop.

``POST /v1/sessions/{sid}/desktop`` (a :class:`DesktopSpec`) starts the session's desktop (or
restarts it with the new spec) and returns its first observation; ``POST .../desktop/step`` (a
:class:`DesktopStep`) validates and performs actions, then observes; ``DELETE .../desktop``
stops it. A desktop that is not running (never started, or its display exited: something on it
can end it) is a 409 naming the next step; the session itself stays usable. The calls run on
the session lanes (lanes.py, in the session's turn): start on ``long``, a step on ``tty`` (like
keystrokes, it waits up to its own bound for the screen), stop on ``short``.
"""

# no ``from __future__ import annotations``: FastAPI reads the routes' ``Auth`` alias, a local
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Response

from dockyard.sandbox.desktop.host import DesktopDown, DesktopHost
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep
from dockyard.sandbox.lanes import Busy, Kind, SessionLanes
from dockyard.sandbox.sessions import SessionManager, SessionNotFound


def start(sm: SessionManager, host: DesktopHost, sid: str, spec: DesktopSpec) -> DesktopObservation:
    s = sm.get(sid)
    if s.box is not None:
        raise ValueError(
            "desktop: a container session (a layered image run as Docker runs it) has no "
            "desktop here; create the session with container=false"
        )
    with s.lock:
        if s.desktop is not None:
            s.desktop.stop()
        s.desktop = host.start(sid, s.ws, s.uid, s.spec.limits, spec, s.env, s.spec.network)
        return host.step(s.desktop, s.ws, s.uid, s.spec.limits, DesktopStep(), True, s.env)


def step(sm: SessionManager, host: DesktopHost, sid: str, req: DesktopStep) -> DesktopObservation:
    s = sm.get(sid)
    with s.lock:
        d = s.desktop
        if d is None:
            raise DesktopDown(f"session {sid} has no desktop: start it (POST .../desktop)")
        if not d.alive:
            raise DesktopDown(f"the desktop exited ({d.last_words}): start it again")
        return host.step(d, s.ws, s.uid, s.spec.limits, req, False, s.env)


def stop(sm: SessionManager, sid: str) -> bool:
    s = sm.get(sid)
    with s.lock:
        d, s.desktop = s.desktop, None
    if d is not None:
        d.stop()
    return d is not None


def desktop_router(
    sm: Callable[[], SessionManager], lanes: SessionLanes, auth: Callable[..., Any]
) -> APIRouter:
    """The routes, over the service's session manager ``sm()``, its lanes and its auth."""
    router = APIRouter()
    Auth = Annotated[None, Depends(auth)]
    hosts: dict[int, DesktopHost] = {}

    def host() -> DesktopHost:
        m = sm()
        return hosts.setdefault(id(m), DesktopHost(m.ctx))

    async def call(kind: Kind, sid: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await lanes.call(kind, sid, fn, *args)
        except Busy as e:
            raise HTTPException(429, str(e), headers={"Retry-After": str(e.retry_after_s)}) from e
        except SessionNotFound as e:
            raise HTTPException(404, f"no session {e.args[0]} (unknown, deleted or reaped)") from e
        except DesktopDown as e:
            raise HTTPException(409, f"desktop not running: {e}") from e
        except ValueError as e:
            raise HTTPException(422, str(e)) from e

    @router.post("/v1/sessions/{sid}/desktop", response_model=DesktopObservation)
    async def start_desktop(sid: str, spec: DesktopSpec, _: Auth) -> DesktopObservation:
        """Start (or restart) the session's desktop: Xvfb, openbox, ``spec.launch``."""
        return await call("long", sid, start, sm(), host(), sid, spec)

    @router.post("/v1/sessions/{sid}/desktop/step", response_model=DesktopObservation)
    async def step_desktop(sid: str, req: DesktopStep, _: Auth) -> DesktopObservation:
        """Validate and perform actions (or pyautogui code), then observe the screen."""
        return await call("tty", sid, step, sm(), host(), sid, req)

    @router.delete("/v1/sessions/{sid}/desktop", status_code=204)
    async def stop_desktop(sid: str, _: Auth) -> Response:
        if not await call("short", sid, stop, sm(), sid):
            raise HTTPException(404, f"session {sid} has no desktop")
        return Response(status_code=204)

    return router
