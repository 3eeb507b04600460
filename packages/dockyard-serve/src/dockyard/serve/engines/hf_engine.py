"""Transformers fallback engine: the GenerationEngine interface without vLLM.

A token-by-token sampling loop over a Hugging Face causal LM with a KV cache, batched over every
sample of every request in flight. It is slow next to vLLM but exact and dependency-light, for
machines without vLLM and for tests. One scheduler task runs the model; each step:

    decode: one forward of the batch's last tokens against its KV cache       [B, 1] -> [B, V]
    prefill: one forward of the requests that arrived since (left-padded; a prompt once per
             request, its cache then copied to its n samples), merged into the batch
    logits /= T                                                                (greedy if T = 0)
    top-k / top-p filter, sample (a torch.Generator per sample, seeded with seed + i)
    logprob = log softmax(logits / T)[token]                 (before top-k/top-p, like the trainer)
    version = the engine's policy version at this step
    retire the samples that hit EOS, a stop token or string, max_tokens or the context length

What batching changes: nothing but float rounding. The batch is left-padded; each row's
attention mask hides the padding and its position ids count only its own tokens, so a row's
logits are those it gets alone up to the order in which a batched matmul or attention sums
(float32 on CPU: logprobs within 1e-5 of an unpadded forward). The random stream is the
sample's own: one float64 uniform per sampled token from its generator, turned into a token by
inverse CDF over its filtered probabilities, whatever else is in the batch and whenever pauses,
aborts or updates happen. So greedy tokens equal unbatched ones and a seeded sample equals the
one its request gives alone, except where two scores tie within that rounding (greedy) or the
uniform falls within it of a CDF boundary; in bfloat16 the rounding, and so the chance, grows.

Between steps the scheduler yields to the event loop and waits while the engine is paused, so
``pause("keep")`` freezes samples with their KV caches, and a weight update lands between two
tokens. ``pause("abort")`` drops the caches instead: the samples continue after resume by
re-encoding prompt + tokens so far with the new weights. Requests that arrive while the engine
is idle wait ``batch_wait_s`` for the rest of their burst (the collector sends a step's groups
at once); later ones join the batch at the next step.

Needs ``pip install "dockyard-serve[transformers]"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dockyard.core.interfaces import (
    GenerationEngine,
    GenerationResult,
    SamplingParams,
    WeightReceiver,
)
from dockyard.serve.transports.torch_dtypes import from_numpy

_INSTALL = 'the transformers engine needs torch and transformers: pip install "dockyard-serve[transformers]"'


@dataclass(eq=False)
class _Request:
    """One ``generate`` call: ``n`` samples of ``prompt``, answered together."""

    prompt: list[int]
    params: SamplingParams
    stop_ids: set[int]
    future: asyncio.Future
    samples: list[_Sample] = field(default_factory=list)


@dataclass(eq=False)
class _Sample:
    """One row of the batch: a sample's generator and what it produced so far."""

    request: _Request
    gen: Any  # torch.Generator
    budget: int  # max_tokens, capped by the context length
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    reason: str | None = None
    shared: int = 0  # prompt tokens it took from another sample's prefill (its group's first)

    @property
    def done(self) -> bool:
        return self.reason is not None or self.request.future.done()  # done: cancelled


class TransformersEngine(GenerationEngine):
    """Args:
    model: a Hugging Face model folder.
    initial_version: the policy version of the weights in ``model``.
    device, dtype: where and in which precision to run (``"cpu"``, ``"float32"``).
    max_model_len: the context length (prompt + completion); default the model's
        ``max_position_embeddings``. Samples stop there (``"length"``); a longer prompt is a
        ``ValueError``.
    max_num_seqs: the most samples in the batch; queued requests join as rows free up.
    batch_wait_s: how long an idle engine waits after a request for others to batch with it.
    """

    def __init__(
        self,
        model: str,
        *,
        initial_version: int = 0,
        device: str = "cpu",
        dtype: str = "float32",
        max_model_len: int | None = None,
        max_num_seqs: int = 256,
        batch_wait_s: float = 0.002,
    ) -> None:
        self.model_path = model
        self._version = initial_version
        self.device = device
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.batch_wait_s = batch_wait_s
        self.model: Any = None
        self.tokenizer: Any = None
        self.eos_ids: set[int] = set()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._abort_epoch = 0
        self.tokens_generated = 0
        self.last_update: dict[str, Any] = {}
        # the scheduler's state: see _step
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._requests: dict[_Request, None] = {}  # unanswered, in arrival order
        self._queue: list[_Request] = []  # not yet prefilled
        self._fresh: list[_Sample] = []  # in flight without a KV cache (after pause("abort"))
        self._rows: list[_Sample] = []  # the batch, in the order of the cache's rows
        self._cache: Any = None  # DynamicCache: per layer [B, kv_heads, S, head_dim]
        self._mask: Any = None  # [B, S] int64: 1 where the cache holds a token of the row
        self._epoch = 0  # the abort epoch of the cache

    async def start(self) -> TransformersEngine:
        if self.model is not None:
            return self
        try:
            # lazy: torch is optional in dockyard-serve (the transformers extra)
            import torch

            # lazy: transformers is optional in dockyard-serve (the transformers extra)
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_path, dtype=getattr(torch, self.dtype)
        )
        self.model.to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            self.eos_ids.add(int(self.tokenizer.eos_token_id))
        if self.max_model_len is None:
            self.max_model_len = getattr(self.model.config, "max_position_embeddings", None)
        return self

    def shutdown(self) -> None:
        self.model = None
        if self._task is not None:
            self._task.cancel()
        self._fail(RuntimeError("TransformersEngine was shut down"))

    @property
    def policy_version(self) -> int:
        return self._version

    async def generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[Any] | None = None,
    ) -> list[GenerationResult]:
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        if images:
            raise ValueError(
                "images: the transformers engine serves text models here; serve a vision-language "
                "model with the vLLM engine (backend 'vllm')"
            )
        if self.model is None:
            raise RuntimeError("TransformersEngine is not started: await engine.start() first")
        if params.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {params.n}")
        if params.regex or params.structural_tag:
            what = "regex" if params.regex else "structural_tag"
            raise ValueError(
                f"SamplingParams.{what}: the transformers engine does not constrain its output; "
                "use the vLLM engine (backend 'vllm') for structured output"
            )
        prompt = [int(t) for t in prompt_token_ids]
        if not prompt:
            raise ValueError("the prompt is empty")
        room = params.max_tokens
        if self.max_model_len:
            room = min(room, self.max_model_len - len(prompt))
            if room <= 0 < params.max_tokens:
                raise ValueError(
                    f"the prompt has {len(prompt)} tokens: no room left in the context of "
                    f"{self.max_model_len} (max_model_len)"
                )
        loop = self._scheduler()
        req = _Request(
            prompt, params, self.eos_ids | set(params.stop_token_ids), loop.create_future()
        )
        for i in range(params.n):
            gen = torch.Generator(device=self.device)
            seed = params.seed + i if params.seed is not None else None
            gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**31 - 1, (1,))))
            req.samples.append(_Sample(req, gen, max(room, 0)))
        if room <= 0:  # max_tokens = 0
            return [self._result(s) for s in req.samples]
        self._requests[req] = None
        self._queue.append(req)
        self._wake.set()
        return await req.future

    # -- the scheduler ----------------------------------------------------------------------

    def _scheduler(self) -> asyncio.AbstractEventLoop:
        """The running loop, with the scheduler task started on it (again, on a new loop)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._fail(RuntimeError("TransformersEngine moved to another event loop"))
            self._loop, self._wake = loop, asyncio.Event()
            self._task = loop.create_task(self._schedule())
        return loop

    def _busy(self) -> bool:
        return bool(self._queue or self._fresh or self._rows)

    async def _schedule(self) -> None:
        """Run steps while samples are in flight; between steps, let the event loop in."""
        try:
            while True:
                if not self._busy():
                    self._wake.clear()
                    await self._wake.wait()
                    await asyncio.sleep(self.batch_wait_s)  # the rest of a burst joins at once
                await self._resumed.wait()
                if self._busy():
                    try:
                        self._step()
                    except Exception as e:  # the requests in flight fail, the engine goes on
                        self._fail(e)
                await asyncio.sleep(0)  # let requests, pauses and updates in
        finally:
            self._fail(RuntimeError("TransformersEngine's scheduler stopped"))

    def _fail(self, error: BaseException) -> None:
        """Fail every request in flight and empty the batch."""
        for r in self._requests:
            if not r.future.done():
                r.future.set_exception(error)
        self._requests = {}
        self._queue, self._fresh, self._rows, self._cache, self._mask = [], [], [], None, None

    def _step(self) -> None:
        """One token for every sample in flight: decode the batch, prefill the newcomers,
        sample them all at the current policy version, merge, retire the finished."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        if self._epoch != self._abort_epoch:  # pause("abort"): re-encode everything
            self._epoch = self._abort_epoch
            self._fresh += self._rows
            self._rows, self._cache, self._mask = [], None, None
        self._requests = {r: None for r in self._requests if not r.future.done()}  # cancelled
        groups = self._newcomers()
        with torch.no_grad():
            logits, rows = [], list(self._rows)
            if self._rows:
                logits.append(self._decode())
            new = self._prefill(groups) if groups else None
            if new is not None:
                logits.append(new[0])
                rows += new[3]
            if not rows:
                return
            tokens, logprobs = self._pick(torch.cat(logits), rows)
        self._record(rows, tokens.tolist(), logprobs.tolist())
        if new is not None:
            self._merge(*new[1:])
        self._retire()

    def _newcomers(self) -> list[tuple[list[int], list[_Sample]]]:
        """(tokens to prefill, the samples that continue from them): one per re-encoded sample,
        one per queued request that fits in ``max_num_seqs``."""
        self._fresh = [s for s in self._fresh if not s.done]
        groups = [(s.request.prompt + s.tokens, [s]) for s in self._fresh]
        rows = len(self._rows) + len(self._fresh)
        self._fresh = []
        queue, self._queue = [r for r in self._queue if not r.future.done()], []
        for i, r in enumerate(queue):
            if rows and rows + len(r.samples) > self.max_num_seqs:
                self._queue = queue[i:]
                break
            groups.append((r.prompt, r.samples))
            rows += len(r.samples)
        return groups

    def _decode(self) -> Any:
        """``[B, V]``: the next-token logits of the batch, whose last tokens are not cached yet."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        ids = torch.tensor([[s.tokens[-1]] for s in self._rows], device=self.device)
        positions = self._mask.sum(-1, keepdim=True)  # the row's own token count
        mask = torch.cat([self._mask, self._mask.new_ones(len(self._rows), 1)], 1)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self._cache,
            use_cache=True,
        )
        self._cache, self._mask = out.past_key_values, mask
        return out.logits[:, -1]

    def _prefill(self, groups: list[tuple[list[int], list[_Sample]]]) -> tuple[Any, Any, Any, Any]:
        """Encode each group's tokens (left-padded) into a new cache, then give each sample of a
        group its own copy of the group's row: ``([N, V] logits, cache, [N, S] mask, samples)``."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        # lazy: transformers is optional in dockyard-serve (the transformers extra)
        from transformers import DynamicCache

        width = max(len(t) for t, _ in groups)
        ids = [[0] * (width - len(t)) + t for t, _ in groups]
        mask = [[0] * (width - len(t)) + [1] * len(t) for t, _ in groups]
        ids_t = torch.tensor(ids, device=self.device)
        mask_t = torch.tensor(mask, device=self.device)
        out = self.model(
            input_ids=ids_t,
            attention_mask=mask_t,
            position_ids=(mask_t.cumsum(-1) - 1).clamp(min=0),
            past_key_values=DynamicCache(),
            use_cache=True,
            logits_to_keep=1,
        )
        for t, ss in groups:  # each group's tokens were encoded once, for its first sample
            for s in ss[1:]:
                s.shared = len(t)
        cache, samples = out.past_key_values, [s for _, ss in groups for s in ss]
        index = torch.tensor(
            [g for g, (_, ss) in enumerate(groups) for _ in ss], device=self.device
        )
        if len(samples) > len(groups):
            cache.batch_select_indices(index)
        return out.logits[:, -1][index], cache, mask_t[index], samples

    def _merge(self, cache: Any, mask: Any, samples: list[_Sample]) -> None:
        """Append prefilled rows to the batch, left-padding whichever cache is shorter."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch.nn.functional as F

        if self._cache is None:
            self._cache, self._mask, self._rows = cache, mask, samples
            return
        width = max(self._mask.shape[1], mask.shape[1])
        a, b = width - self._mask.shape[1], width - mask.shape[1]
        for mine, theirs in zip(self._cache.layers, cache.layers, strict=True):
            mine.keys = _cat(F.pad(mine.keys, (0, 0, a, 0)), F.pad(theirs.keys, (0, 0, b, 0)))
            mine.values = _cat(F.pad(mine.values, (0, 0, a, 0)), F.pad(theirs.values, (0, 0, b, 0)))
        self._mask = _cat(F.pad(self._mask, (a, 0)), F.pad(mask, (b, 0)))
        self._rows = self._rows + samples

    def _retire(self) -> None:
        """Drop finished rows from the batch, and the cache columns only they used."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        keep = [i for i, s in enumerate(self._rows) if not s.done]
        if len(keep) == len(self._rows):
            return
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        index = torch.tensor(keep, device=self.device)
        self._cache.batch_select_indices(index)
        self._mask = self._mask[index]
        self._rows = [self._rows[i] for i in keep]
        first = int(self._mask.any(0).int().argmax())  # the first column a row still uses
        if first:
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]
            self._mask = self._mask[:, first:]

    def _pick(self, logits: Any, rows: list[_Sample]) -> tuple[Any, Any]:
        """``([B] tokens, [B] logprobs)`` from ``[B, V]`` logits, each row with its request's
        settings; sampled rows draw one uniform each from their own generator."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        temps = torch.tensor([s.request.params.temperature for s in rows], device=logits.device)
        sampled = temps > 0
        z = logits.float() / torch.where(sampled, temps, 1.0)[:, None]
        logp = torch.log_softmax(z, -1)
        tokens = z.argmax(-1)
        idx = sampled.nonzero()[:, 0].tolist()
        if idx:
            sub = [rows[i] for i in idx]
            probs = torch.softmax(_top_k_top_p(z[idx], [s.request.params for s in sub]), -1)
            cdf = probs.double().cumsum(-1)
            u = torch.stack(
                [torch.rand((), generator=s.gen, dtype=torch.float64, device=z.device) for s in sub]
            )
            picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
            tokens[idx] = picked.clamp(max=z.shape[-1] - 1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]

    def _record(self, rows: list[_Sample], tokens: list[int], logprobs: list[float]) -> None:
        """Append each row's token; finish samples and answer requests whose samples are done."""
        for s, tok, lp in zip(rows, tokens, logprobs, strict=True):
            s.tokens.append(tok)
            s.logprobs.append(lp)
            s.versions.append(self._version)
            self.tokens_generated += 1
            stop = s.request.params.stop
            if tok in s.request.stop_ids or (
                stop and any(x in self.tokenizer.decode(s.tokens) for x in stop)
            ):
                s.reason = "stop"
            elif len(s.tokens) >= s.budget:
                s.reason = "length"
            req = s.request
            if s.reason and not req.future.done() and all(x.reason for x in req.samples):
                req.future.set_result([self._result(x) for x in req.samples])
                self._requests.pop(req, None)

    def _result(self, s: _Sample) -> GenerationResult:
        text = self.tokenizer.decode([t for t in s.tokens if t not in self.eos_ids])
        for x in s.request.params.stop:
            if x in text:
                text = text[: text.index(x)]
        return GenerationResult(
            token_ids=np.asarray(s.tokens, dtype=np.int64),
            logprobs=np.asarray(s.logprobs, dtype=np.float32),
            text=text,
            finish_reason=s.reason or "length",
            policy_versions=np.asarray(s.versions, dtype=np.int32),
            cached_prompt_tokens=s.shared,
        )

    # -- pausing and weights ----------------------------------------------------------------

    async def pause(self, mode: str = "keep") -> None:
        if mode not in ("keep", "abort"):
            raise ValueError(f"pause mode must be 'keep' or 'abort', got {mode!r}")
        self._resumed.clear()
        if mode == "abort":
            self._abort_epoch += 1
        await asyncio.sleep(0)

    async def resume(self) -> None:
        self._resumed.set()

    async def update_weights(self, receiver: WeightReceiver, version: int) -> None:
        """Copy each bucket into the parameters by HF name (in a thread: transports block)."""
        # lazy: torch is optional in dockyard-serve (the transformers extra)
        import torch

        auto_pause = self._resumed.is_set()
        if auto_pause:
            await self.pause("keep")
        params = dict(self.model.named_parameters())
        params.update(dict(self.model.named_buffers()))

        def load() -> dict[str, int]:
            n = buckets = 0
            for b in receiver.receive():
                if b.version != version:
                    raise RuntimeError(
                        f"weight update carries version {b.version}, the engine expected {version}"
                    )
                with torch.no_grad():
                    for name, arr in b.tensors.items():
                        if name not in params:
                            raise KeyError(
                                f"weight {name!r} is not a parameter of {self.model_path}"
                            )
                        params[name].copy_(from_numpy(np.asarray(arr)))
                        n += 1
                buckets += 1
            return {"buckets": buckets, "tensors": n}

        self.last_update = await asyncio.to_thread(load)
        self._version = version
        if auto_pause:
            await self.resume()


def _cat(a: Any, b: Any) -> Any:
    # lazy: torch is optional in dockyard-serve (the transformers extra)
    import torch

    return torch.cat([a, b])


def _top_k_top_p(z: Any, params: list[SamplingParams]) -> Any:
    """``[B, V]`` scores with what each row's top-k, then top-p, excludes set to -inf."""
    # lazy: torch is optional in dockyard-serve (the transformers extra)
    import torch

    k = torch.tensor([p.top_k if p.top_k > 0 else z.shape[-1] for p in params], device=z.device)
    top_p = torch.tensor([p.top_p for p in params], dtype=z.dtype, device=z.device)
    if bool((k < z.shape[-1]).any()):
        kth = z.sort(-1, descending=True).values.gather(-1, k.clamp(min=1)[:, None] - 1)
        z = z.masked_fill(z < kth, -float("inf"))
    if bool((top_p < 1).any()):
        sz, order = z.sort(dim=-1, descending=True, stable=True)
        ps = sz.softmax(-1)
        drop = (ps.cumsum(-1) - ps > top_p[:, None]) & (top_p < 1)[:, None]
        z = z.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), -float("inf"))
    return z
