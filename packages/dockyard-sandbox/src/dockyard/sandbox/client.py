"""Python clients of the sandbox service: :class:`SandboxClient` (sync) and
:class:`AsyncSandboxClient` (asyncio), same methods, same semantics.

Failure policy — the part a trainer relies on:

* The service being unreachable, dying mid-task, answering 5xx, or losing a task (404 for an id
  it handed out, e.g. after a restart) gives a :class:`TaskResult` with verdict
  ``infra_error`` — never an exception that loses the task, never a silent ``failed``.
* 429 (queue full) is retried after the server's ``Retry-After`` until ``max_wait_s``; then
  ``infra_error``.
* A request the service rejects as invalid (4xx other than 404/429) raises
  :class:`SandboxRequestError`: that is a bug in the caller (or, for a session's file and
  terminal calls, the agent's request: a path that is not there), and it names the field.
* A session call the service could not serve — 5xx, or still 429 after ``max_wait_s`` —
  raises :class:`SandboxUnavailable` (exec and finish return ``infra_error`` results): never
  the caller's fault, so an environment's tool masks the sample instead of showing the model
  an error it did not cause.

Example::

    from dockyard.sandbox.client import SandboxClient
    from dockyard.sandbox.models import Task

    with SandboxClient("http://127.0.0.1:9090", token=None) as sb:
        result = sb.run_task(Task(files={"sol.py": code}, test_files={"test_sol.py": tests},
                                  tests={"fail_to_pass": ["test_sol.py::test_it"]}))
        reward = 1.0 if result.verdict == "passed" else 0.0
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from dockyard.sandbox.envspec import TtyRequest, TtyResult
from dockyard.sandbox.models import (
    ExecRequest,
    ExecResult,
    FinishRequest,
    SessionCreate,
    SessionInfo,
    Task,
    TaskResult,
    TaskStatus,
    Verdict,
)

_TRANSPORT_ERRORS = (httpx.TransportError, httpx.TimeoutException)
# The connection went away before a response: the service closed an idle keep-alive connection
# as the request went out on it, a proxy dropped it, or the service died mid-request.
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# sent again after a dropped connection: the same GET, PUT (the same bytes at the same path) or
# DELETE (a 404 the second time is accepted) has the effect of one; POSTs (exec, tty, finish)
# are not, unless the caller says so (a one-shot task)
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})


class SandboxRequestError(ValueError):
    """The service rejected the request as invalid (HTTP 4xx); the message names the field."""

    def __init__(self, status: int, detail: Any):
        self.status = status
        self.detail = detail
        super().__init__(f"sandbox service rejected the request (HTTP {status}): {detail}")


class SandboxUnavailable(RuntimeError):
    """The service could not be reached or failed (only raised where no result can carry it)."""


def _as_task(task: Task | Mapping[str, Any]) -> Task:
    return task if isinstance(task, Task) else Task.model_validate(task)


def _detail(resp: httpx.Response) -> Any:
    try:
        return resp.json().get("detail", resp.text)
    except ValueError:
        return resp.text


def _refused(resp: httpx.Response) -> Exception:
    """The exception of a request the service did not serve: :class:`SandboxUnavailable` for
    its own failure or saturation (5xx; a 429 still refused after ``max_wait_s``) — never the
    caller's fault, so an environment masks it — else :class:`SandboxRequestError` (the request
    itself is refused: 4xx, its message names the field)."""
    if resp.status_code == 429 or resp.status_code >= 500:
        return SandboxUnavailable(
            f"sandbox service could not serve {resp.request.method} {resp.request.url.path} "
            f"(HTTP {resp.status_code}): {_detail(resp)}"
        )
    return SandboxRequestError(resp.status_code, _detail(resp))


def _retry_after(resp: httpx.Response) -> float:
    try:
        return max(0.05, float(resp.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def _http_timeout(task_timeout_s: float) -> httpx.Timeout:
    # Reading a result can take the task's whole time limit plus set-up and queueing.
    return httpx.Timeout(connect=10.0, read=task_timeout_s * 2 + 120.0, write=60.0, pool=60.0)


def _task_timeout(t: Task) -> httpx.Timeout:
    """A task with an environment may provision it first (up to its timeout_s)."""
    return _http_timeout(t.timeout_s + (t.environment.timeout_s if t.environment else 0.0))


def _create_timeout(s: SessionCreate) -> httpx.Timeout | None:
    """A session with an environment may provision it first (up to its timeout_s)."""
    return _http_timeout(s.environment.timeout_s) if s.environment is not None else None


def _tty_result(resp: httpx.Response) -> TtyResult:
    if resp.status_code != 200:
        raise _refused(resp)
    return TtyResult.model_validate(resp.json())


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _task_result(resp: httpx.Response, what: str) -> TaskResult:
    """Turn a response carrying a TaskResult into one; non-2xx becomes infra_error or raises."""
    if resp.status_code == 200:
        return TaskResult.model_validate(resp.json())
    if resp.status_code >= 500 or resp.status_code in (404, 429):  # 429: past max_wait_s
        return TaskResult.infra(f"{what}: HTTP {resp.status_code}: {_detail(resp)}")
    raise _refused(resp)


class _Base:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        max_wait_s: float = 600.0,
        poll_s: float = 30.0,
    ):
        self.url = url.rstrip("/")
        self.token = token
        self.max_wait_s = max_wait_s
        self.poll_s = poll_s


class SandboxClient(_Base):
    """Blocking client. Thread-safe (one ``httpx.Client`` connection pool)."""

    def __init__(self, url: str, token: str | None = None, **kw: Any):
        super().__init__(url, token, **kw)
        self._http = httpx.Client(
            base_url=self.url, headers=_headers(token), timeout=_http_timeout(60)
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        timeout: httpx.Timeout | None = None,
        rerun_ok: bool = False,
        **kw: Any,
    ) -> httpx.Response:
        """One request, retrying 429 until ``max_wait_s``; a dropped connection is retried
        once, on a new one, for the idempotent methods (``IDEMPOTENT``) and where running the
        request twice is harmless (``rerun_ok``: a one-shot task). Other transport errors
        propagate."""
        deadline = time.monotonic() + self.max_wait_s
        dropped = 0
        while True:
            try:
                resp = self._http.request(method, path, timeout=timeout or self._http.timeout, **kw)
            except _DROPPED:
                dropped += 1
                if dropped > 1 or not (rerun_ok or method in IDEMPOTENT):
                    raise
                continue
            if resp.status_code != 429 or time.monotonic() >= deadline:
                return resp
            time.sleep(min(_retry_after(resp), max(0.0, deadline - time.monotonic())))

    # -- one-shot tasks -------------------------------------------------------------------------
    def run_task(self, task: Task | Mapping[str, Any]) -> TaskResult:
        """Run ``task`` and wait for its result (``POST /v1/tasks:run``)."""
        t = _as_task(task)
        try:
            resp = self._request(
                "POST",
                "/v1/tasks:run",
                json=t.model_dump(mode="json"),
                timeout=_task_timeout(t),
                rerun_ok=True,  # a task is a pure function of its inputs
            )
        except _TRANSPORT_ERRORS as e:
            return TaskResult.infra(
                f"sandbox service unreachable or died mid-task: {e!r}", metadata=t.metadata
            )
        if resp.status_code == 429:
            return TaskResult.infra(
                "sandbox service queue full beyond max_wait_s", metadata=t.metadata
            )
        return _task_result(resp, "run_task")

    def run_tasks(self, tasks: Iterable[Task | Mapping[str, Any]]) -> list[TaskResult]:
        """Run several tasks one after another (use the async client for concurrency)."""
        return [self.run_task(t) for t in tasks]

    def submit(self, task: Task | Mapping[str, Any]) -> str:
        """Queue ``task`` (``POST /v1/tasks``) and return its id. Raises SandboxUnavailable."""
        t = _as_task(task)
        try:
            resp = self._request("POST", "/v1/tasks", json=t.model_dump(mode="json"))
        except _TRANSPORT_ERRORS as e:
            raise SandboxUnavailable(f"submit: {e!r}") from e
        if resp.status_code == 202:
            return str(resp.json()["task_id"])
        if resp.status_code >= 500 or resp.status_code == 429:
            raise SandboxUnavailable(f"submit: HTTP {resp.status_code}: {_detail(resp)}")
        raise _refused(resp)

    def get(self, task_id: str) -> TaskStatus:
        resp = self._request("GET", f"/v1/tasks/{task_id}")
        if resp.status_code != 200:
            raise _refused(resp)
        return TaskStatus.model_validate(resp.json())

    def result(self, task_id: str, timeout_s: float | None = None) -> TaskResult:
        """Wait for the result of a submitted task (long-polls); infra_error if it is lost."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 1e9)
        while True:
            wait = max(0.0, min(self.poll_s, deadline - time.monotonic()))
            try:
                resp = self._request(
                    "GET",
                    f"/v1/tasks/{task_id}/result",
                    params={"wait_s": wait},
                    timeout=_http_timeout(wait),
                )
            except _TRANSPORT_ERRORS as e:
                return TaskResult.infra(
                    f"sandbox service died or unreachable: {e!r}", task_id=task_id
                )
            if resp.status_code == 202 and time.monotonic() < deadline:
                continue
            if resp.status_code == 202:
                return TaskResult.infra(f"no result within {timeout_s} s", task_id=task_id)
            return _task_result(resp, f"result of {task_id}")

    def cancel(self, task_id: str) -> bool:
        """Cancel a queued or running task; True if it was still pending."""
        resp = self._request("DELETE", f"/v1/tasks/{task_id}")
        if resp.status_code == 404:
            return False
        if resp.status_code != 200:
            raise _refused(resp)
        return bool(resp.json().get("cancelled", False))

    # -- sessions -------------------------------------------------------------------------------
    def create_session(self, spec: SessionCreate | Mapping[str, Any] | None = None) -> str:
        s = spec if isinstance(spec, SessionCreate) else SessionCreate.model_validate(spec or {})
        try:
            resp = self._request(
                "POST", "/v1/sessions", json=s.model_dump(mode="json"), timeout=_create_timeout(s)
            )
        except _TRANSPORT_ERRORS as e:
            raise SandboxUnavailable(f"create_session: {e!r}") from e
        if resp.status_code >= 500 or resp.status_code == 429:
            raise SandboxUnavailable(f"create_session: HTTP {resp.status_code}: {_detail(resp)}")
        if resp.status_code != 201:
            raise _refused(resp)
        return SessionInfo.model_validate(resp.json()).session_id

    def exec(
        self, session_id: str, command: str, timeout_s: float = 30.0, cwd: str = "."
    ) -> ExecResult:
        req = ExecRequest(command=command, timeout_s=timeout_s, cwd=cwd)
        try:
            resp = self._request(
                "POST",
                f"/v1/sessions/{session_id}/exec",
                json=req.model_dump(),
                timeout=_http_timeout(timeout_s),
            )
        except _TRANSPORT_ERRORS as e:
            return ExecResult(
                exit_code=None,
                stderr=f"sandbox service unreachable: {e!r}",
                verdict=Verdict.infra_error,
            )
        if resp.status_code >= 500 or resp.status_code == 429:  # 429: busy past max_wait_s
            return ExecResult(
                exit_code=None, stderr=str(_detail(resp)), verdict=Verdict.infra_error
            )
        if resp.status_code != 200:
            raise _refused(resp)
        return ExecResult.model_validate(resp.json())

    def put_file(self, session_id: str, path: str, data: bytes | str) -> None:
        body = data.encode() if isinstance(data, str) else data
        resp = self._request(
            "PUT", f"/v1/sessions/{session_id}/files", params={"path": path}, content=body
        )
        if resp.status_code != 204:
            raise _refused(resp)

    def get_file(self, session_id: str, path: str) -> bytes:
        resp = self._request("GET", f"/v1/sessions/{session_id}/files", params={"path": path})
        if resp.status_code != 200:
            raise _refused(resp)
        return resp.content

    def finish(self, session_id: str, request: FinishRequest | Mapping[str, Any]) -> TaskResult:
        """Evaluate the session's workspace diff in a fresh sandbox with held-out tests."""
        f = request if isinstance(request, FinishRequest) else FinishRequest.model_validate(request)
        try:
            resp = self._request(
                "POST",
                f"/v1/sessions/{session_id}/finish",
                json=f.model_dump(mode="json"),
                timeout=_http_timeout(f.timeout_s),
            )
        except _TRANSPORT_ERRORS as e:
            return TaskResult.infra(
                f"sandbox service died or unreachable: {e!r}", metadata=f.metadata
            )
        return _task_result(resp, f"finish of session {session_id}")

    def tty(self, session_id: str, keys: list[str], wait_s: float = 0.5) -> TtyResult:
        """Keystrokes into the session's persistent terminal; returns its screen (tty.py)."""
        req = TtyRequest(keys=keys, wait_s=wait_s)
        resp = self._request(
            "POST", f"/v1/sessions/{session_id}/tty", json=req.model_dump(),
            timeout=_http_timeout(wait_s + 30),
        )  # fmt: skip
        return _tty_result(resp)

    def delete_session(self, session_id: str) -> None:
        resp = self._request("DELETE", f"/v1/sessions/{session_id}")
        if resp.status_code not in (200, 204, 404):
            raise _refused(resp)

    # -- service --------------------------------------------------------------------------------
    def health(self, detail: bool = True) -> dict[str, Any]:
        """``/healthz``; with ``detail`` (needs the token) the load, isolation and lanes too."""
        resp = self._http.get("/healthz", params={"detail": 1} if detail else None)
        resp.raise_for_status()
        return dict(resp.json())

    def metrics(self) -> str:
        resp = self._http.get("/metrics")
        resp.raise_for_status()
        return resp.text


class AsyncSandboxClient(_Base):
    """asyncio client with the same methods as :class:`SandboxClient` (all coroutines)."""

    def __init__(
        self, url: str, token: str | None = None, *, max_connections: int = 256, **kw: Any
    ):
        super().__init__(url, token, **kw)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=64)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(token), timeout=_http_timeout(60), limits=limits
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        timeout: httpx.Timeout | None = None,
        rerun_ok: bool = False,
        **kw: Any,
    ) -> httpx.Response:
        """See :meth:`SandboxClient._request`."""
        deadline = time.monotonic() + self.max_wait_s
        dropped = 0
        while True:
            try:
                resp = await self._http.request(
                    method, path, timeout=timeout or self._http.timeout, **kw
                )
            except _DROPPED:
                dropped += 1
                if dropped > 1 or not (rerun_ok or method in IDEMPOTENT):
                    raise
                continue
            if resp.status_code != 429 or time.monotonic() >= deadline:
                return resp
            await asyncio.sleep(min(_retry_after(resp), max(0.0, deadline - time.monotonic())))

    async def run_task(self, task: Task | Mapping[str, Any]) -> TaskResult:
        t = _as_task(task)
        try:
            resp = await self._request(
                "POST",
                "/v1/tasks:run",
                json=t.model_dump(mode="json"),
                timeout=_task_timeout(t),
                rerun_ok=True,  # a task is a pure function of its inputs
            )
        except _TRANSPORT_ERRORS as e:
            return TaskResult.infra(
                f"sandbox service unreachable or died mid-task: {e!r}", metadata=t.metadata
            )
        if resp.status_code == 429:
            return TaskResult.infra(
                "sandbox service queue full beyond max_wait_s", metadata=t.metadata
            )
        return _task_result(resp, "run_task")

    async def run_tasks(
        self, tasks: Iterable[Task | Mapping[str, Any]], concurrency: int = 64
    ) -> list[TaskResult]:
        """Run tasks concurrently (at most ``concurrency`` in flight); results in input order."""
        sem = asyncio.Semaphore(concurrency)

        async def one(t: Task | Mapping[str, Any]) -> TaskResult:
            async with sem:
                return await self.run_task(t)

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    async def submit(self, task: Task | Mapping[str, Any]) -> str:
        t = _as_task(task)
        try:
            resp = await self._request("POST", "/v1/tasks", json=t.model_dump(mode="json"))
        except _TRANSPORT_ERRORS as e:
            raise SandboxUnavailable(f"submit: {e!r}") from e
        if resp.status_code == 202:
            return str(resp.json()["task_id"])
        if resp.status_code >= 500 or resp.status_code == 429:
            raise SandboxUnavailable(f"submit: HTTP {resp.status_code}: {_detail(resp)}")
        raise _refused(resp)

    async def get(self, task_id: str) -> TaskStatus:
        resp = await self._request("GET", f"/v1/tasks/{task_id}")
        if resp.status_code != 200:
            raise _refused(resp)
        return TaskStatus.model_validate(resp.json())

    async def result(self, task_id: str, timeout_s: float | None = None) -> TaskResult:
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 1e9)
        while True:
            wait = max(0.0, min(self.poll_s, deadline - time.monotonic()))
            try:
                resp = await self._request(
                    "GET",
                    f"/v1/tasks/{task_id}/result",
                    params={"wait_s": wait},
                    timeout=_http_timeout(wait),
                )
            except _TRANSPORT_ERRORS as e:
                return TaskResult.infra(
                    f"sandbox service died or unreachable: {e!r}", task_id=task_id
                )
            if resp.status_code == 202 and time.monotonic() < deadline:
                continue
            if resp.status_code == 202:
                return TaskResult.infra(f"no result within {timeout_s} s", task_id=task_id)
            return _task_result(resp, f"result of {task_id}")

    async def cancel(self, task_id: str) -> bool:
        resp = await self._request("DELETE", f"/v1/tasks/{task_id}")
        if resp.status_code == 404:
            return False
        if resp.status_code != 200:
            raise _refused(resp)
        return bool(resp.json().get("cancelled", False))

    async def create_session(self, spec: SessionCreate | Mapping[str, Any] | None = None) -> str:
        s = spec if isinstance(spec, SessionCreate) else SessionCreate.model_validate(spec or {})
        try:
            resp = await self._request(
                "POST", "/v1/sessions", json=s.model_dump(mode="json"), timeout=_create_timeout(s)
            )
        except _TRANSPORT_ERRORS as e:
            raise SandboxUnavailable(f"create_session: {e!r}") from e
        if resp.status_code >= 500 or resp.status_code == 429:
            raise SandboxUnavailable(f"create_session: HTTP {resp.status_code}: {_detail(resp)}")
        if resp.status_code != 201:
            raise _refused(resp)
        return SessionInfo.model_validate(resp.json()).session_id

    async def exec(
        self, session_id: str, command: str, timeout_s: float = 30.0, cwd: str = "."
    ) -> ExecResult:
        req = ExecRequest(command=command, timeout_s=timeout_s, cwd=cwd)
        try:
            resp = await self._request(
                "POST",
                f"/v1/sessions/{session_id}/exec",
                json=req.model_dump(),
                timeout=_http_timeout(timeout_s),
            )
        except _TRANSPORT_ERRORS as e:
            return ExecResult(
                exit_code=None,
                stderr=f"sandbox service unreachable: {e!r}",
                verdict=Verdict.infra_error,
            )
        if resp.status_code >= 500 or resp.status_code == 429:  # 429: busy past max_wait_s
            return ExecResult(
                exit_code=None, stderr=str(_detail(resp)), verdict=Verdict.infra_error
            )
        if resp.status_code != 200:
            raise _refused(resp)
        return ExecResult.model_validate(resp.json())

    async def put_file(self, session_id: str, path: str, data: bytes | str) -> None:
        body = data.encode() if isinstance(data, str) else data
        resp = await self._request(
            "PUT", f"/v1/sessions/{session_id}/files", params={"path": path}, content=body
        )
        if resp.status_code != 204:
            raise _refused(resp)

    async def get_file(self, session_id: str, path: str) -> bytes:
        resp = await self._request("GET", f"/v1/sessions/{session_id}/files", params={"path": path})
        if resp.status_code != 200:
            raise _refused(resp)
        return resp.content

    async def finish(
        self, session_id: str, request: FinishRequest | Mapping[str, Any]
    ) -> TaskResult:
        f = request if isinstance(request, FinishRequest) else FinishRequest.model_validate(request)
        try:
            resp = await self._request(
                "POST",
                f"/v1/sessions/{session_id}/finish",
                json=f.model_dump(mode="json"),
                timeout=_http_timeout(f.timeout_s),
            )
        except _TRANSPORT_ERRORS as e:
            return TaskResult.infra(
                f"sandbox service died or unreachable: {e!r}", metadata=f.metadata
            )
        return _task_result(resp, f"finish of session {session_id}")

    async def tty(self, session_id: str, keys: list[str], wait_s: float = 0.5) -> TtyResult:
        """Keystrokes into the session's persistent terminal; returns its screen (tty.py)."""
        req = TtyRequest(keys=keys, wait_s=wait_s)
        resp = await self._request(
            "POST", f"/v1/sessions/{session_id}/tty", json=req.model_dump(),
            timeout=_http_timeout(wait_s + 30),
        )  # fmt: skip
        return _tty_result(resp)

    async def delete_session(self, session_id: str) -> None:
        resp = await self._request("DELETE", f"/v1/sessions/{session_id}")
        if resp.status_code not in (200, 204, 404):
            raise _refused(resp)

    async def health(self, detail: bool = True) -> dict[str, Any]:
        """``/healthz``; with ``detail`` (needs the token) the load, isolation and lanes too."""
        resp = await self._http.get("/healthz", params={"detail": 1} if detail else None)
        resp.raise_for_status()
        return dict(resp.json())

    async def metrics(self) -> str:
        resp = await self._http.get("/metrics")
        resp.raise_for_status()
        return resp.text
