"""The allowed-token sets of a grammar-constrained sample, as the engine applied them.

vLLM's xgrammar backend fills one bitmask per request and step (``GrammarMatcher.
fill_next_token_bitmask``) and masks the logits with it before sampling; with
``logprobs_mode="processed_logprobs"`` the sampled token's logprob is then taken over the
allowed set. The trainer must take its logprobs over the same sets (or the importance ratio
compares two different policies), so :class:`GrammarReplay` re-runs the matcher over the
sampled tokens with the engine's inputs — its tokenizer, its vocabulary size, the request's
stop tokens — and returns the bitmask at every position. A token the replayed grammar does not
accept means the two disagree (another xgrammar, another tokenizer): an error, never a silent
mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dockyard.core.experience import AllowedTokens


class GrammarMismatch(RuntimeError):
    """The replayed grammar rejects a token the engine sampled under it."""


class GrammarReplay:
    """Args:
    tokenizer: the engine's Hugging Face tokenizer.
    vocab_size: the model's vocabulary (logit rows; may exceed the tokenizer's).
    """

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        # lazy: xgrammar comes with vLLM (the vllm extra); only constrained samples need it
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = int(vocab_size)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size)
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=True)

    def allowed(
        self, structural_tag: str, tokens: Sequence[int], stop_token_ids: Sequence[int]
    ) -> AllowedTokens:
        """The allowed tokens at each of ``tokens`` (sampled under ``structural_tag`` with
        ``stop_token_ids`` ending it, as vLLM's matcher is built)."""
        xgr = self._xgr
        compiled = self.compiler.compile_structural_tag(structural_tag)
        matcher = xgr.GrammarMatcher(compiled, override_stop_tokens=list(stop_token_ids) or None)
        mask = xgr.allocate_token_bitmask(1, self.vocab_size)
        out = np.empty((len(tokens), mask.shape[1]), dtype=np.int32)
        for i, tok in enumerate(tokens):
            matcher.fill_next_token_bitmask(mask)
            out[i] = mask[0].numpy()
            if not matcher.accept_token(int(tok)):
                raise GrammarMismatch(
                    f"token {int(tok)} at position {i} was sampled under the grammar but the "
                    "replayed grammar rejects it: the engine and dockyard compiled different "
                    "grammars (xgrammar version, tokenizer or vocabulary size differ)"
                )
        return AllowedTokens.from_bitmasks(out)
