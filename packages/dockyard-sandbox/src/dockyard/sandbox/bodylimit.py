"""A cap on request bodies (threat 20), as ASGI middleware in front of every route.

A request whose ``Content-Length`` is over the cap is answered 413 before a byte of its body is
read; one without a length (chunked) is counted as it streams and refused once it passes the
cap. Either way the service never holds more than the cap of one body. After a 413 the rest of
the body is read and thrown away (up to ``drain_bytes``), so that an ordinary client, which
sends the whole body before it reads the answer, gets the 413 instead of a reset connection.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class BodyTooLarge(HTTPException):
    def __init__(self, max_bytes: int, got: int | None = None) -> None:
        size = f"{got} bytes" if got is not None else "more than that"
        super().__init__(
            413,
            f"request body of {size} is over this service's cap of {max_bytes} bytes "
            "(--max-request-mb): send the repository as a smaller tarball, or raise the cap",
        )


class MaxBodySize:
    def __init__(
        self,
        app: Any,
        max_bytes: int,
        on_reject: Callable[[], None] | None = None,
        drain_bytes: int = 1 << 30,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject or (lambda: None)
        self.drain_bytes = drain_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            self.on_reject()
            await self._reject(send, BodyTooLarge(self.max_bytes, int(length)))
            if int(length) <= self.drain_bytes:
                await _drain(receive)
            return
        seen = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge as e:  # raised where no route turned it into a response
            self.on_reject()
            if started:
                raise
            await self._reject(send, e)

    @staticmethod
    async def _reject(send: Send, e: BodyTooLarge) -> None:
        body = json.dumps({"detail": e.detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
