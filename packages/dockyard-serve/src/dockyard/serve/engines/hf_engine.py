"""Transformers fallback engine: the GenerationEngine interface without vLLM.

A token-by-token sampling loop over a Hugging Face causal LM with a KV cache. It is slow next to
vLLM but exact and dependency-light, for machines without vLLM and for tests. Each step:

    logits = model(last token, past_key_values)[-1] / T      (T = temperature; greedy if T = 0)
    top-k / top-p filter, sample (a torch.Generator per sample, seeded with seed + i)
    logprob = log softmax(logits / T)[token]                 (before top-k/top-p, like the trainer)
    version = the engine's policy version at this step

Between steps the loop yields to the event loop and waits while the engine is paused, so
``pause("keep")`` freezes samples with their KV caches, and a weight update lands between two
tokens. ``pause("abort")`` drops the caches instead: the samples continue after resume by
re-encoding prompt + tokens so far with the new weights.

Needs ``pip install "dockyard-serve[transformers]"``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from dockyard.core.interfaces import (
    GenerationEngine,
    GenerationResult,
    SamplingParams,
    WeightReceiver,
)

_INSTALL = 'the transformers engine needs torch and transformers: pip install "dockyard-serve[transformers]"'


class TransformersEngine(GenerationEngine):
    """Args:
    model: a Hugging Face model folder.
    initial_version: the policy version of the weights in ``model``.
    device, dtype: where and in which precision to run (``"cpu"``, ``"float32"``).
    """

    def __init__(
        self, model: str, *, initial_version: int = 0, device: str = "cpu", dtype: str = "float32"
    ) -> None:
        self.model_path = model
        self._version = initial_version
        self.device = device
        self.dtype = dtype
        self.model: Any = None
        self.tokenizer: Any = None
        self.eos_ids: set[int] = set()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._abort_epoch = 0
        self.tokens_generated = 0
        self.last_update: dict[str, Any] = {}

    async def start(self) -> TransformersEngine:
        if self.model is not None:
            return self
        try:
            import torch
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
        return self

    def shutdown(self) -> None:
        self.model = None

    @property
    def policy_version(self) -> int:
        return self._version

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams
    ) -> list[GenerationResult]:
        if self.model is None:
            raise RuntimeError("TransformersEngine is not started: await engine.start() first")
        if params.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {params.n}")
        seeds = [None if params.seed is None else params.seed + i for i in range(params.n)]
        return list(
            await asyncio.gather(*(self._sample(list(prompt_token_ids), params, s) for s in seeds))
        )

    def _pick(self, logits: Any, p: SamplingParams, gen: Any) -> tuple[int, float]:
        import torch

        if p.temperature <= 0:
            tok = int(torch.argmax(logits))
            return tok, float(torch.log_softmax(logits.float(), -1)[tok])
        z = logits.float() / p.temperature
        logp = torch.log_softmax(z, -1)
        filt = z.clone()
        if p.top_k > 0:
            kth = torch.topk(filt, min(p.top_k, filt.numel())).values[-1]
            filt[filt < kth] = -float("inf")
        if p.top_p < 1.0:
            sorted_z, idx = torch.sort(filt, descending=True)
            cum = torch.cumsum(torch.softmax(sorted_z, -1), -1)
            drop = cum - torch.softmax(sorted_z, -1) > p.top_p
            filt[idx[drop]] = -float("inf")
        tok = int(torch.multinomial(torch.softmax(filt, -1), 1, generator=gen))
        return tok, float(logp[tok])

    async def _sample(
        self, prompt: list[int], p: SamplingParams, seed: int | None
    ) -> GenerationResult:
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**31 - 1, (1,))))
        stop_ids = self.eos_ids | set(p.stop_token_ids)
        tokens: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        reason = "length"
        past: Any = None
        epoch = self._abort_epoch
        while len(tokens) < p.max_tokens:
            await self._resumed.wait()
            if self._abort_epoch != epoch:  # aborted while paused: recompute the cache
                past, epoch = None, self._abort_epoch
            feed = prompt + tokens if past is None else tokens[-1:]
            with torch.no_grad():
                out = self.model(
                    torch.tensor([feed], device=self.device), past_key_values=past, use_cache=True
                )
            past = out.past_key_values
            tok, lp = self._pick(out.logits[0, -1], p, gen)
            tokens.append(tok)
            logprobs.append(lp)
            versions.append(self._version)
            self.tokens_generated += 1
            if tok in stop_ids:
                reason = "stop"
                break
            if p.stop and any(s in self.tokenizer.decode(tokens) for s in p.stop):
                reason = "stop"
                break
            await asyncio.sleep(0)  # let other samples, pauses and updates in
        text = self.tokenizer.decode([t for t in tokens if t not in self.eos_ids])
        for s in p.stop:
            if s in text:
                text = text[: text.index(s)]
        return GenerationResult(
            token_ids=np.asarray(tokens, dtype=np.int64),
            logprobs=np.asarray(logprobs, dtype=np.float32),
            text=text,
            finish_reason=reason,
            policy_versions=np.asarray(versions, dtype=np.int32),
        )

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
        import torch

        from dockyard.serve.transports.torch_dtypes import from_numpy

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
