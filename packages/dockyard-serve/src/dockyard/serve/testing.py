"""Tiny models for tests and benchmarks, built locally (no hub); :func:`shm_push`, a weight
push through the real shm transport from a thread standing in for the trainer.

:func:`tiny_model_dir` writes a Hugging Face folder (``config.json``, ``model.safetensors``,
tokenizer files with a chat template) for a randomly initialised Qwen2 with ``head_dim = 32``
(vLLM's CPU attention rejects 16), built here with transformers directly: serve sits beside the
trainer backends, not on them, so it does not borrow ``dockyard.torch.testing``'s builder.

Needs ``pip install "dockyard-serve[transformers]"`` (torch, transformers, tokenizers).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dockyard.serve.transports.shm import ShmReceiver, ShmSender

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = (
    "def add(a, b):\n    return a + b\n",
    "The answer is 42. 1 + 1 = 2, 2 * 3 = 6, 10 - 4 = 6.",
    "import numpy as np\nx = np.zeros((3, 4))\nprint(x.shape)\n",
    "Question: what is 7 times 6? Answer: 42.",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    "assert add(2, 3) == 5, 'addition is broken'",
)


def _build_tokenizer(folder: Path, vocab_size: int) -> Any:
    """Train a byte-level BPE on a small built-in corpus and save it with a chat template."""
    # lazy: tokenizers is optional in dockyard-serve (it comes with the transformers extra)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # lazy: transformers is optional in dockyard-serve (the transformers extra)
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(_CORPUS) * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def tiny_model_dir(
    folder: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 128,
    vocab_size: int = 512,
    seed: int = 0,
) -> Path:
    """Write a tiny random Qwen2 (``head_dim = hidden_size / num_heads``, must be >= 32 for
    vLLM on CPU) and its tokenizer to ``folder``; returns the folder.

    The vocabulary of the model is ``vocab_size`` (the tokenizer's may be smaller; the extra
    rows are never produced by the tokenizer but may be sampled).
    """
    # lazy: torch is optional in dockyard-serve (the transformers extra)
    import torch

    # lazy: transformers is optional in dockyard-serve (the transformers extra)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    head_dim = hidden_size // num_heads
    if head_dim < 32:
        raise ValueError(
            f"tiny_model_dir: head_dim = hidden_size / num_heads = {head_dim}; vLLM's CPU "
            "attention needs head_dim >= 32 (raise hidden_size or lower num_heads)"
        )
    tok = _build_tokenizer(folder, vocab_size)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    # Larger-than-default init so a random model's distribution is far from uniform
    # (greedy choices are then stable against float noise).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    return folder


VLM_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def tiny_vlm_dir(
    folder: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    vision_dim: int = 32,
    vocab_size: int = 512,
    max_pixels: int = 112 * 112,
    seed: int = 0,
) -> Path:
    """Write a tiny random Qwen2-VL (a one-block vision tower of width ``vision_dim``, one
    head of 32; a two-head text model) with its tokenizer, chat template and image processor
    to ``folder``; returns the folder.

    Images are resized to at most ``max_pixels`` (14-pixel patches merged 2 × 2: a 112 × 112
    screenshot is 16 image tokens). The chat template renders ``{"type": "image"}`` content
    as ``<|vision_start|><|image_pad|><|vision_end|>``; the engine expands the pad.
    """
    # lazy: torch is optional in dockyard-serve (the transformers extra)
    import torch

    # lazy: transformers is optional in dockyard-serve (the transformers extra)
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _build_tokenizer(folder, vocab_size)
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    tok.chat_template = VLM_CHAT_TEMPLATE
    tok.save_pretrained(folder)
    ids = {t: tok.convert_tokens_to_ids(t) for t in [*VISION_TOKENS, "<|im_end|>", "<|endoftext|>"]}
    eos, pad = ids["<|im_end|>"], ids["<|endoftext|>"]
    head_dim = 32
    text = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": hidden_size // head_dim,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        # M-RoPE: the head's 16 frequencies split over (time, height, width)
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
        "tie_word_embeddings": False,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "bos_token_id": None,
    }
    vision = {
        "depth": 1,
        "embed_dim": vision_dim,
        "hidden_size": hidden_size,
        "num_heads": vision_dim // head_dim,
        "mlp_ratio": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_chans": 3,
    }
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).to(torch.float32)
    with torch.no_grad():  # far from uniform, as in tiny_model_dir
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "min_pixels": 56 * 56,
        "max_pixels": max_pixels,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    return folder


def perturbed_weights(folder: str | Path, scale: float = 0.05, seed: int = 1) -> dict[str, Any]:
    """The model in ``folder`` with Gaussian noise added: ``{hf_name: np.ndarray float32}``.

    Stands in for "the weights after a training step" in weight-update tests.
    """
    # lazy: safetensors is optional in dockyard-serve (its transformers and sglang extras)
    from safetensors.numpy import load_file

    rng = np.random.default_rng(seed)
    state = load_file(str(Path(folder) / "model.safetensors"))
    return {k: (v + scale * rng.standard_normal(v.shape).astype(v.dtype)) for k, v in state.items()}


def write_weights(folder: str | Path, src: str | Path, tensors: dict[str, Any]) -> Path:
    """Copy the model folder ``src`` to ``folder`` with its weights replaced by ``tensors``."""
    # lazy: safetensors is optional in dockyard-serve (its transformers and sglang extras)
    from safetensors.numpy import save_file

    folder = Path(folder)
    shutil.copytree(src, folder, dirs_exist_ok=True)
    save_file(dict(tensors.items()), str(folder / "model.safetensors"))
    return folder


@contextlib.contextmanager
def shm_push(
    sock: str, buckets: list[dict[str, Any]], version: int, bucket_bytes: int = 256 << 10
) -> Iterator[Any]:
    """A trainer thread sending ``buckets`` as ``version`` through the real shm transport at
    ``sock``; yields the receiver (the engine's side) and, when the block ends, joins the
    thread and raises what it raised."""
    errors: list[BaseException] = []

    def trainer() -> None:
        try:
            sender = ShmSender(sock, timeout_s=120, bucket_bytes=bucket_bytes, checksum=True)
            sender.send(buckets, version)
            sender.close()
        except BaseException as e:
            errors.append(e)

    rx = ShmReceiver(sock, timeout_s=120)
    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    yield rx
    thread.join(120)
    if errors:
        raise errors[0]
