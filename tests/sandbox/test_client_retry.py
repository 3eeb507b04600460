"""The client against a connection dropped before the answer (the keep-alive race: the service
closes an idle connection as a request goes out on it). Code around the transport, tested with
a raw socket server that drops the first connection after reading the request."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from dockyard.sandbox.client import AsyncSandboxClient, SandboxClient
from dockyard.sandbox.models import Task, TaskResult, Verdict


class _Dropper:
    """Answers on 127.0.0.1: drops the first ``drops`` connections after reading a request,
    answers later ones with a passed TaskResult."""

    def __init__(self, drops: int) -> None:
        self.drops, self.requests = drops, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        body = TaskResult(task_id="t", verdict=Verdict.passed).model_dump_json().encode()
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(h.split(b":")[1])
                        for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests += 1
                if self.requests <= self.drops:
                    continue  # closed without a response
                if head.startswith((b"PUT ", b"DELETE ")):
                    conn.sendall(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                    continue
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dropper(request: pytest.FixtureRequest) -> Iterator[_Dropper]:
    d = _Dropper(request.param)
    yield d
    d.close()


@pytest.mark.parametrize("dropper", [1], indirect=True)
def test_a_task_whose_connection_dropped_is_sent_again(dropper: _Dropper) -> None:
    with SandboxClient(dropper.url) as c:
        assert c.run_task(Task(test_command="true")).verdict == Verdict.passed
    assert dropper.requests == 2


@pytest.mark.parametrize("dropper", [1], indirect=True)
def test_the_async_client_sends_it_again_too(dropper: _Dropper) -> None:
    async def go() -> TaskResult:
        async with AsyncSandboxClient(dropper.url) as c:
            return await c.run_task(Task(test_command="true"))

    assert asyncio.run(go()).verdict == Verdict.passed
    assert dropper.requests == 2


@pytest.mark.parametrize("dropper", [2], indirect=True)
def test_only_once_then_it_is_an_infra_error(dropper: _Dropper) -> None:
    with SandboxClient(dropper.url) as c:
        r = c.run_task(Task(test_command="true"))
    assert r.verdict == Verdict.infra_error
    assert "unreachable or died mid-task" in r.detail
    assert dropper.requests == 2


@pytest.mark.parametrize("dropper", [1], indirect=True)
def test_a_session_command_is_never_sent_twice(dropper: _Dropper) -> None:
    """``exec`` may have run before the connection went: running it again could repeat a
    side effect, so the drop is reported (an infra_error result) instead."""
    with SandboxClient(dropper.url) as c:
        r = c.exec("s", "echo hi >> log")
    assert r.verdict == Verdict.infra_error
    assert dropper.requests == 1


@pytest.mark.parametrize("dropper", [1], indirect=True)
@pytest.mark.parametrize("call", ["get_file", "put_file", "delete_session"])
def test_a_file_call_or_a_delete_is_sent_again(dropper: _Dropper, call: str) -> None:
    """GET, PUT (the same bytes at the same path) and DELETE do what one call does when sent
    twice: a dropped connection (as after a service error that closed it) is retried once."""
    with SandboxClient(dropper.url) as c:
        if call == "get_file":
            c.get_file("s", "a.txt")
        elif call == "put_file":
            c.put_file("s", "a.txt", "x")
        else:
            c.delete_session("s")
    assert dropper.requests == 2


def test_a_service_failure_on_a_file_call_is_unavailable_not_the_callers_error() -> None:
    """A 5xx, or a 429 past max_wait_s, on a session file call raises SandboxUnavailable (an
    environment's tool masks the sample), a 4xx SandboxRequestError (the agent's request)."""
    import httpx

    from dockyard.sandbox.client import SandboxClient, SandboxRequestError, SandboxUnavailable

    answers = iter([500, 429, 422])

    def handler(request: httpx.Request) -> httpx.Response:
        code = next(answers)
        return httpx.Response(code, json={"detail": f"status {code}"}, headers={"Retry-After": "0"})

    c = SandboxClient("http://sandbox.invalid", max_wait_s=0)
    c._http.close()
    c._http = httpx.Client(base_url=c.url, transport=httpx.MockTransport(handler))
    with pytest.raises(SandboxUnavailable, match="HTTP 500"):
        c.get_file("s", "a.txt")
    with pytest.raises(SandboxUnavailable, match="HTTP 429"):
        c.put_file("s", "a.txt", "x")
    with pytest.raises(SandboxRequestError, match="HTTP 422"):
        c.get_file("s", "a.txt")
    c.close()
