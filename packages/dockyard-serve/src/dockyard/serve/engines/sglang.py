"""SGLang engine adapter: an SGLang server reached over its native HTTP API.

Endpoints used (SGLang ``python/sglang/srt/entrypoints/http_server.py``):

================================ =================================================================
``POST /generate``               ``{"input_ids", "sampling_params", "return_logprob": true,
                                 "stream": true}``; SSE ``data: {...}`` chunks with cumulative
                                 ``output_ids`` and ``meta_info.output_token_logprobs``
                                 (``[[logprob, token_id, text], ...]``), ``meta_info.finish_reason``
                                 (``{"type": "stop" | "length" | "abort", ...}``)
``POST /pause_generation``       ``{"mode": "in_place" | "abort" | "retract"}`` (keep -> in_place)
``POST /continue_generation``    ``{}``
``POST /update_weights_from_disk`` ``{"model_path", "weight_version", "flush_cache",
                                 "abort_all_requests"}`` -> ``{"success", "message", ...}``
================================ =================================================================

The server is either one you run (``SGLangEngine(url)``) or one the engine starts itself from a
model (``SGLangEngine(model=..., tensor_parallel_size=..., mem_fraction_static=...)``: what
``dockyard train`` does with ``policy.generation.backend: sglang``, one server per engine
replica; :mod:`dockyard.serve.engines.sglang_server`). A started server that dies makes the
next call raise ``EngineDeadError``, and :meth:`SGLangEngine.shutdown` stops it.

Weights reach SGLang as a safetensors folder: :meth:`SGLangEngine.update_weights` drains the
receiver (any dockyard transport) into ``staging_dir`` (shared storage the server can read, e.g.
``/dev/shm`` on the same host) and asks the server to load it. SGLang's tensor/distributed
update endpoints need SGLang's own serialiser or process-group handshake on the trainer side and
are not used.

Per-token versions: tokens are tagged with the adapter's policy version when their stream
chunk arrives; updates happen between ``pause`` and ``resume``, so chunks that arrive during a
pause (already computed) keep the old version.

Only the request/response code is tested here (against a local fake server): SGLang itself does
not install on these CPU machines. Needs ``httpx`` (a base dependency).
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from dockyard.core.interfaces import (
    GenerationEngine,
    GenerationResult,
    SamplingParams,
    WeightReceiver,
)
from dockyard.serve.engines.sglang_server import EngineDeadError, SGLangServer
from dockyard.serve.engines.versions import finish_reason

_PAUSE_MODES = {"keep": "in_place", "abort": "abort"}


class SGLangError(RuntimeError):
    """The SGLang server answered with an error (the message names the endpoint)."""


def sampling_params_json(p: SamplingParams, max_tokens: int, seed: int | None) -> dict[str, Any]:
    """dockyard's :class:`SamplingParams` as SGLang's ``sampling_params`` (one sample)."""
    out: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k if p.top_k > 0 else -1,
    }
    if p.stop:
        out["stop"] = list(p.stop)
    if p.stop_token_ids:
        out["stop_token_ids"] = list(p.stop_token_ids)
    if seed is not None:
        out["sampling_seed"] = seed
    if p.regex:
        out["regex"] = p.regex
    if p.structural_tag:
        raise ValueError(
            "SamplingParams.structural_tag: the SGLang engine does not return the allowed-token "
            "sets its grammar applied (the trainer needs them); use the vLLM engine"
        )
    return out


class SGLangEngine(GenerationEngine):
    """Args:
    url: a running server, e.g. ``http://127.0.0.1:30000`` (or None with ``model``).
    model: start a server from this model folder instead (``url`` None); ``server_options``
        are the :class:`~dockyard.serve.engines.sglang_server.SGLangServer` arguments
        (``tensor_parallel_size``, ``mem_fraction_static``, ``context_length``, ``seed``...).
    initial_version: the policy version the server was started with.
    staging_dir: where weight updates are written for ``update_weights_from_disk``.
    timeout_s: limit on every HTTP call (generation streams: between chunks).
    config_dir: a model folder whose ``*.json`` files (config, tokenizer, generation config) are
        copied beside each staged update, for servers that read them from ``model_path``
        (default for a started server: ``model`` when it is a folder).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None = None,
        initial_version: int = 0,
        staging_dir: str | None = None,
        timeout_s: float = 300.0,
        config_dir: str | None = None,
        **server_options: Any,
    ) -> None:
        if (url is None) == (model is None):
            raise ValueError("SGLangEngine needs either url (a running server) or model")
        if url is not None and server_options:
            raise ValueError(
                f"SGLangEngine(url=...) talks to a running server: {', '.join(server_options)} "
                "only apply to a server it starts (pass model instead of url)"
            )
        self.server = None if model is None else SGLangServer(model, **server_options)
        if self.server is not None:
            url = self.server.url
            if config_dir is None and os.path.isdir(str(model)):
                config_dir = model
        assert url is not None
        self.url = url.rstrip("/")
        self.config_dir = config_dir
        self._version = initial_version
        self.staging_dir = staging_dir or os.path.join(
            tempfile.gettempdir(), "dockyard-sglang-weights"
        )
        self.timeout_s = timeout_s
        self._client: Any = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._abort_epoch = 0
        self.last_update: dict[str, Any] = {}

    async def start(self) -> SGLangEngine:
        if self.server is not None:
            await self.server.start()
        self._client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(self.timeout_s))
        return self

    async def aclose(self) -> None:
        """Close the HTTP client (the server keeps running)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def shutdown(self) -> None:
        """Forget the HTTP client; stop the server if this engine started it."""
        self._client = None
        if self.server is not None:
            self.server.stop()

    def _dead(self, e: BaseException) -> BaseException:
        """``e`` (a transport error), or ``EngineDeadError`` when the started server exited."""
        if self.server is not None and not self.server.alive():
            return EngineDeadError(
                f"the SGLang server at {self.url} has exited ({type(e).__name__}: {e}); its "
                f"log ends:\n{self.server.log_tail()}"
            )
        return e

    @property
    def policy_version(self) -> int:
        return self._version

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            raise RuntimeError("SGLangEngine is not started: await engine.start() first")
        try:
            r = await self._client.post(path, json=body)
        except httpx.TransportError as e:
            raise self._dead(e) from e
        try:
            data = r.json() if r.content else {}
        except ValueError:
            data = {"message": r.text}
        if r.status_code != 200 or data.get("success") is False:
            raise SGLangError(
                f"SGLang {path} failed (HTTP {r.status_code}): {data.get('message', data)}"
            )
        return data

    async def generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[Any] | None = None,
    ) -> list[GenerationResult]:
        if images:
            raise ValueError(
                "images: the SGLang engine serves text models here; serve a vision-language "
                "model with the vLLM engine (backend 'vllm')"
            )
        if params.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {params.n}")
        seeds = [None if params.seed is None else params.seed + i for i in range(params.n)]
        return list(
            await asyncio.gather(*(self._sample(list(prompt_token_ids), params, s) for s in seeds))
        )

    async def _sample(
        self, prompt: list[int], p: SamplingParams, seed: int | None
    ) -> GenerationResult:
        tokens: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        text = ""
        while True:
            await self._resumed.wait()
            epoch = self._abort_epoch
            body = {
                "input_ids": prompt + tokens,
                "sampling_params": sampling_params_json(p, p.max_tokens - len(tokens), seed),
                "return_logprob": True,
                "stream": True,
            }
            try:
                ids, lps, seg_text, reason = await self._stream(body, versions)
            except httpx.TransportError as e:
                raise self._dead(e) from e
            tokens += ids
            logprobs += lps
            text += seg_text
            if reason == "abort" and self._abort_epoch != epoch and len(tokens) < p.max_tokens:
                continue  # aborted by pause("abort"): re-queue as a continuation
            break
        return GenerationResult(
            token_ids=np.asarray(tokens, dtype=np.int64),
            logprobs=np.asarray(logprobs, dtype=np.float32),
            text=text,
            finish_reason=reason,
            policy_versions=np.asarray(versions, dtype=np.int32),
        )

    async def _stream(
        self, body: dict[str, Any], versions: list[int]
    ) -> tuple[list[int], list[float], str, str]:
        """One streaming /generate call; appends a version per new token to ``versions``."""
        if self._client is None:
            raise RuntimeError("SGLangEngine is not started: await engine.start() first")
        ids: list[int] = []
        lps: list[float] = []
        text = ""
        reason = "abort"
        async with self._client.stream("POST", "/generate", json=body) as r:
            if r.status_code != 200:
                raise SGLangError(
                    f"SGLang /generate failed (HTTP {r.status_code}): {(await r.aread()).decode()[:500]}"
                )
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                new_ids, new_lps, text, fin = parse_generate_chunk(chunk)
                fresh = len(new_ids) - len(ids)
                versions += [self._version] * max(0, fresh)
                ids, lps = new_ids, new_lps
                if fin is not None:
                    reason = fin
        return ids, lps, text, reason

    async def pause(self, mode: str = "keep") -> None:
        if mode not in _PAUSE_MODES:
            raise ValueError(f"pause mode must be 'keep' or 'abort', got {mode!r}")
        self._resumed.clear()
        if mode == "abort":
            self._abort_epoch += 1
        await self._post("/pause_generation", {"mode": _PAUSE_MODES[mode]})

    async def resume(self) -> None:
        await self._post("/continue_generation", {})
        self._resumed.set()

    async def update_weights(self, receiver: WeightReceiver, version: int) -> None:
        """Stage the update as safetensors under ``staging_dir/v{version}`` and load it."""
        folder = os.path.join(self.staging_dir, f"v{version}")
        n = await asyncio.to_thread(stage_safetensors, receiver, version, folder)
        if self.config_dir:
            for f in glob.glob(os.path.join(self.config_dir, "*.json")):
                shutil.copy(f, folder)
        auto_pause = self._resumed.is_set()
        if auto_pause:
            await self.pause("keep")
        data = await self._post(
            "/update_weights_from_disk",
            {
                "model_path": folder,
                "weight_version": str(version),
                "flush_cache": True,
                "abort_all_requests": False,
            },
        )
        self._version = version
        self.last_update = {"tensors": n, "message": data.get("message", "")}
        if auto_pause:
            await self.resume()


def parse_generate_chunk(chunk: dict[str, Any]) -> tuple[list[int], list[float], str, str | None]:
    """``(output_ids, logprobs, text, finish_reason | None)`` from one /generate response (or
    stream chunk; SGLang's are cumulative). Logprobs come from ``meta_info.output_token_logprobs``
    rows ``[logprob, token_id, text]``; the ids must agree with ``output_ids``."""
    meta = chunk.get("meta_info") or {}
    rows = meta.get("output_token_logprobs") or []
    ids = [int(t) for t in chunk.get("output_ids") or [r[1] for r in rows]]
    lps = [float(r[0]) for r in rows]
    if rows and [int(r[1]) for r in rows] != ids:
        raise SGLangError(
            f"SGLang /generate: output_token_logprobs ids {[r[1] for r in rows][:8]}... "
            f"disagree with output_ids {ids[:8]}..."
        )
    if len(lps) != len(ids):
        raise SGLangError(
            f"SGLang /generate returned {len(ids)} tokens but {len(lps)} logprobs "
            "(request return_logprob=true)"
        )
    fin = meta.get("finish_reason")
    reason = None
    if fin is not None:
        reason = finish_reason(fin.get("type") if isinstance(fin, dict) else str(fin))
    return ids, lps, str(chunk.get("text", "")), reason


def stage_safetensors(receiver: WeightReceiver, version: int, folder: str) -> int:
    """Drain ``receiver`` into ``folder/model-XXXXX.safetensors`` (one file per bucket)."""
    # lazy: safetensors is optional in dockyard-serve (its transformers and sglang extras)
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    n = 0
    for b in receiver.receive():
        if b.version != version:
            raise RuntimeError(
                f"weight update carries version {b.version}, the engine expected {version}"
            )
        save_file(
            {k: np.ascontiguousarray(v) for k, v in b.tensors.items()},
            os.path.join(folder, f"model-{b.index:05d}.safetensors"),
        )
        n += len(b.tensors)
    return n
