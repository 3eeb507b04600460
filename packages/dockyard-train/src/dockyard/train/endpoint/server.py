"""The OpenAI-compatible HTTP endpoint in front of the inference fleet, one base URL per episode.

Routes (``{key}``: the episode's key, from :meth:`Endpoint.open`)::

    POST /episodes/{key}/v1/chat/completions   messages (+ tools) -> choices[0].message
    POST /episodes/{key}/v1/completions        prompt (text or token ids) -> choices[0].text
    GET  /episodes/{key}/v1/models             the one model name
    (the same under /v1/... with "Authorization: Bearer {key}", for clients that fix the path)

Every request is one :class:`~dockyard.train.endpoint.recorder.Turn` of its episode: the engine's
prompt ids, completion ids, logprobs and policy versions. Sampling is the run's
(``policy.generation``: temperature, top-p/k, stop): the trainer recomputes logprobs at that
temperature, so a request's own ``temperature`` / ``top_p`` are ignored; its ``max_tokens``
(or ``max_completion_tokens``) lowers the run's ``max_new_tokens``, never raises it. ``n`` > 1
and streaming are refused (400). A prompt over the engine's context is a 400 whose message says
``maximum context length`` (litellm raises ``ContextWindowExceededError``): the scaffold ends,
and the episode is scored on what it did. An unknown or closed key is a 404.

The server runs in the caller's event loop (uvicorn's ``Server.serve`` as a task), where the
engine clients are awaited; scaffolds run in threads or processes of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any

try:  # they come with dockyard-sandbox[server]; the route handlers' annotations need Request here
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
except ImportError as e:  # pragma: no cover
    raise ImportError(
        'the endpoint needs fastapi and uvicorn: pip install "dockyard-sandbox[server]"'
    ) from e

from dockyard.core.interfaces.generation import SamplingParams
from dockyard.train.endpoint.chat import ChatSession, reply_message
from dockyard.train.endpoint.recorder import EpisodeRecord, Turn


class RequestError(ValueError):
    """A request the endpoint refuses (HTTP ``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Episode:
    """One episode's record, chat state and request lock."""

    record: EpisodeRecord
    chat: ChatSession
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Endpoint:
    """Serves episodes' requests on ``engine`` and records them.

    Args:
        engine: ``async generate(prompt_ids, params) -> list[GenerationResult]``.
        renderer: the run's :class:`~dockyard.train.prompts.PromptRenderer`.
        params: the run's sampling settings (``n`` is ignored: one sample per request).
        model: the model name the endpoint answers to (any name is accepted).
    """

    def __init__(self, engine: Any, renderer: Any, params: SamplingParams, model: str = "dockyard"):
        self.engine, self.renderer, self.model = engine, renderer, model
        self.params = replace(params, n=1)
        self.episodes: dict[str, Episode] = {}

    def open(self, key: str | None = None) -> str:
        """A new episode; returns its key."""
        key = key or secrets.token_hex(16)
        if key in self.episodes:
            raise ValueError(f"episode key {key!r} is in use")
        self.episodes[key] = Episode(EpisodeRecord(key), ChatSession(self.renderer))
        return key

    def close(self, key: str) -> EpisodeRecord:
        """End the episode (later requests get 404); returns its record."""
        ep = self.episodes.pop(key)
        ep.record.closed = True
        return ep.record

    def _episode(self, key: str | None) -> Episode:
        ep = self.episodes.get(key or "")
        if ep is None:
            raise RequestError(
                404, "unknown or finished episode key: use the base URL given to this episode"
            )
        return ep

    def _params(self, body: dict[str, Any]) -> SamplingParams:
        if int(body.get("n") or 1) != 1:
            raise RequestError(400, "n > 1 is not supported: one completion per request")
        if body.get("stream"):
            raise RequestError(400, "stream=true is not supported: request without streaming")
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        p = self.params
        if cap is not None:
            p = replace(p, max_tokens=max(1, min(int(cap), p.max_tokens)))
        return replace(p, seed=None)

    async def _generate(
        self, ep: Episode, prompt_ids: list[int], params: SamplingParams, reused: bool
    ) -> Any:
        try:
            (gen,) = await self.engine.generate(prompt_ids, params)
        except Exception as e:
            if "maximum context length" in str(e):
                raise RequestError(400, f"maximum context length exceeded: {e}") from e
            raise
        ep.record.add(
            Turn(
                [int(x) for x in prompt_ids],
                [int(x) for x in gen.token_ids],
                [float(x) for x in gen.logprobs],
                [int(x) for x in gen.policy_versions],
                gen.finish_reason,
                reused,
            )
        )
        return gen

    def _usage(self, prompt: list[int], gen: Any) -> dict[str, int]:
        n = len(gen.token_ids)
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": n,
            "total_tokens": len(prompt) + n,
        }

    async def chat(self, key: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/chat/completions``."""
        ep = self._episode(key)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "messages: a non-empty list of chat messages is required")
        tools = body.get("tools") or None
        params = self._params(body)
        async with ep.lock:
            prompt, reused = ep.chat.prompt(messages, tools, ep.record.context)
            gen = await self._generate(ep, prompt, params, reused)
            eos = self.renderer.tokenizer.eos_token_id
            eos_seen = bool(len(gen.token_ids)) and int(gen.token_ids[-1]) == eos
            finish = "length" if gen.finish_reason == "length" else "stop"
            reply = reply_message(gen.text, finish, tools is not None)
            ep.chat.remember(messages, tools, reply, gen.text, eos_seen)
        return {
            "id": f"chatcmpl-{secrets.token_hex(8)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": reply.message,
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": self._usage(prompt, gen),
        }

    async def completion(self, key: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/completions``: ``prompt`` a string (tokenised as it is) or a list of ids."""
        ep = self._episode(key)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.renderer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = [int(t) for t in prompt]
        else:
            raise RequestError(400, "prompt: one string or one list of token ids is required")
        params = self._params(body)
        async with ep.lock:
            gen = await self._generate(ep, ids, params, reused=False)
        finish = "length" if gen.finish_reason == "length" else "stop"
        return {
            "id": f"cmpl-{secrets.token_hex(8)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "text": gen.text, "finish_reason": finish, "logprobs": None}],
            "usage": self._usage(ids, gen),
        }


def build_app(endpoint: Endpoint) -> Any:
    """The FastAPI application of ``endpoint`` (routes in the module docstring)."""
    app = FastAPI(
        title="dockyard rollout endpoint", docs_url=None, redoc_url=None, openapi_url=None
    )

    def bearer(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    async def answer(call: Any, key: str | None, request: Request) -> Any:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise RequestError(400, "the request body must be a JSON object")
            return await call(key, body)
        except RequestError as e:
            kind = "not_found_error" if e.status == 404 else "invalid_request_error"
            err = {"message": str(e), "type": kind, "code": None}
            if "maximum context length" in str(e):
                err["code"] = "context_length_exceeded"
            return JSONResponse({"error": err}, status_code=e.status)
        except ValueError as e:  # a body that is not JSON
            return JSONResponse(
                {"error": {"message": str(e), "type": "invalid_request_error"}}, status_code=400
            )

    def key_of(request: Request) -> str | None:  # the URL's episode key, else the bearer key
        return request.path_params.get("key") or bearer(request)

    async def chat(request: Request) -> Any:
        return await answer(endpoint.chat, key_of(request), request)

    async def completions(request: Request) -> Any:
        return await answer(endpoint.completion, key_of(request), request)

    async def models(request: Request) -> Any:
        if key_of(request) not in endpoint.episodes:
            return JSONResponse({"error": {"message": "unknown episode key"}}, status_code=404)
        return {
            "object": "list",
            "data": [{"id": endpoint.model, "object": "model", "owned_by": "dockyard"}],
        }

    for prefix in ("/episodes/{key}/v1", "/v1"):
        app.add_api_route(f"{prefix}/chat/completions", chat, methods=["POST"])
        app.add_api_route(f"{prefix}/completions", completions, methods=["POST"])
        app.add_api_route(f"{prefix}/models", models, methods=["GET"])
    return app


class EndpointServer:
    """``endpoint`` served over HTTP by uvicorn inside the running event loop.

    Args:
        host: interface to bind (``127.0.0.1``: scaffolds on this machine; ``0.0.0.0`` for
            scaffolds elsewhere, reached at ``advertise``).
        port: TCP port (0: a free one).
        advertise: the host name scaffolds use in their base URL (default: ``host``, or
            ``127.0.0.1`` for ``0.0.0.0``).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise: str | None = None,
    ) -> None:
        self.endpoint, self.host, self.port = endpoint, host, port
        self.advertise = advertise or ("127.0.0.1" if host == "0.0.0.0" else host)
        self._server: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> EndpointServer:
        config = uvicorn.Config(
            build_app(self.endpoint),
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():  # bind failed: its error
                self._task.result()
                raise RuntimeError(f"the endpoint could not listen on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    @property
    def url(self) -> str:
        return f"http://{self.advertise}:{self.port}"

    def base_url(self, key: str) -> str:
        """The OpenAI base URL of episode ``key`` (what a client's ``base_url`` / ``api_base``
        is set to)."""
        return f"{self.url}/episodes/{key}/v1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._task, 10)
            self._server = self._task = None
