"""dockyard.torch.testing: tiny models and the local tokenizer load everywhere with the same ids."""

from __future__ import annotations

import json

import pytest

from dockyard.torch import testing


@pytest.mark.parametrize("family", testing.FAMILIES)
def test_tiny_model_loads_and_ids_round_trip(tmp_path, family):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = testing.build_tiny_model(tmp_path / family, family=family)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == family
    assert config["hidden_size"] // config["num_attention_heads"] >= 32

    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(path)
    assert len(auto) == raw.get_vocab_size() == config["vocab_size"] == 1024
    for text in testing.sample_texts():
        ids = raw.encode(text).ids
        assert auto(text)["input_ids"] == ids, text
        assert auto.decode(ids) == text
    assert auto.eos_token == testing.EOS_TOKEN
    assert auto.pad_token == testing.PAD_TOKEN
    # digits are split one by one (Qwen2's pre-tokenizer), so the model sees "1 2 3", not "123"
    assert len(auto("12345")["input_ids"]) == 5

    chat = auto.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert chat == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"

    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == 1024
    assert sum(p.numel() for p in model.parameters()) < 400_000


def test_builders_cache_by_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKYARD_TESTING_CACHE", str(tmp_path))
    a = testing.build_tokenizer(vocab_size=512)
    mtime = (a / "tokenizer.json").stat().st_mtime_ns
    assert testing.build_tokenizer(vocab_size=512) == a
    assert (a / "tokenizer.json").stat().st_mtime_ns == mtime  # reused, not rebuilt
    assert testing.build_tokenizer(vocab_size=600) != a
    assert a.parent == tmp_path


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="head_dim"):
        testing.build_tiny_model(hidden_size=64, num_heads=4)
    with pytest.raises(ValueError, match="family"):
        testing.build_tiny_model(family="gpt2")
    with pytest.raises(ValueError, match="vocab_size"):
        testing.build_tokenizer(vocab_size=100)


@pytest.mark.vllm
def test_vllm_tokenizer_gives_the_same_ids():
    """vLLM's own tokenizer loader (what the engine uses) agrees with ``tokenizers``."""
    from tokenizers import Tokenizer
    from vllm.tokenizers import get_tokenizer

    path = testing.build_tiny_model(family="qwen2")
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok = get_tokenizer(str(path))
    for text in testing.sample_texts():
        assert tok.encode(text, add_special_tokens=False) == raw.encode(text).ids, text
