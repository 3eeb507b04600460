"""A JAX trainer's GRPO checkpoint exported as a Hugging Face folder (`export_hf`, the CLI).

The checkpoint is written as the GRPO loop writes one (`step_<n>/policy/`, `driver.pkl`,
`done`); transformers loads the export offline and gives the JAX model's logprobs and its
greedy generations. Its tokenizer is the one training used: `tokenizer_name`'s, with
`policy.tokenizer.chat_template` in place of its own template.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from dockyard.core.rl import MaskedNLLLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax import checkpoint as jax_ckpt
from dockyard.jax.models.hf import apply
from dockyard.train import checkpoint as ckpt
from dockyard.train.cli import main
from dockyard.train.export import export_hf

torch = pytest.importorskip("torch")
testing = pytest.importorskip("dockyard.torch.testing", reason="dockyard-torch not installed")

PROMPTS = ["What is 12 + 30?", "Write a function that adds two numbers.", "Say hello."]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return testing.build_tiny_model(family="qwen2")


@pytest.fixture(scope="module")
def run(model_dir, tmp_path_factory):
    """A JAX worker trained two steps, checkpointed after each as GRPO does."""
    worker = JaxPolicyWorker({"model_name": str(model_dir), "precision": "float32",
                              "train_micro_batch_size": 3, "reference_policy": False,
                              "optimizer": {"lr": 1e-2}})  # fmt: skip
    root = tmp_path_factory.mktemp("grpo") / "checkpoints"
    batch = testing.random_batch(6, 24, seed=5)
    for step in (1, 2):
        worker.train_step(batch, MaskedNLLLoss())
        folder = ckpt.step_dir(root, step)
        folder.mkdir(parents=True)
        worker.save_checkpoint(str(folder / "policy"), {"step": step})
        ckpt.save_driver_state(folder, {"step": step, "history": []})
        ckpt.mark_done(folder)
    return worker, root, batch


def _load(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _jax_greedy(worker: JaxPolicyWorker, ids: list[int], eos: int, n: int = 16) -> list[int]:
    """Greedy decoding with the trainer's own model: a full forward per token over one fixed
    right-padded width (causal: the padding never reaches the positions read; one compile)."""
    forward = jax.jit(lambda params, x: apply(worker.graphdef, params, x))
    row = np.zeros((1, 64), np.int32)
    assert len(ids) + n <= row.shape[1], "widen the row"
    row[0, : len(ids)] = ids
    out: list[int] = []
    for _ in range(n):
        t = len(ids) + len(out)
        out.append(int(np.asarray(forward(worker.params, row))[0, t - 1].argmax()))
        row[0, t] = out[-1]
        if out[-1] == eos:
            break
    return out


def _hf_greedy(model, ids: list[int], pad: int) -> list[int]:
    x = torch.as_tensor([ids])
    with torch.no_grad():
        seq = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=16,
                             do_sample=False, pad_token_id=pad)  # fmt: skip
    return seq[0, x.shape[1] :].tolist()


def _assert_same_model(worker: JaxPolicyWorker, batch, folder: Path) -> None:
    model, tok = _load(folder)
    assert tok.chat_template, "the export lost the chat template"
    ids = torch.as_tensor(batch.input_ids)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=torch.as_tensor(
            batch.attention_mask).long()).logits[:, :-1], -1)  # fmt: skip
    want = logp.gather(-1, ids[:, 1:, None])[..., 0].numpy() * batch.attention_mask[:, 1:]
    np.testing.assert_allclose(worker.get_logprobs(batch)[:, 1:], want, atol=5e-5)
    for text in PROMPTS:
        prompt = tok.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, tokenize=False)  # fmt: skip
        p = tok(prompt)["input_ids"]
        assert _hf_greedy(model, p, tok.pad_token_id) == _jax_greedy(worker, p, tok.eos_token_id)


def test_jax_checkpoint_exports_the_trained_model(run, model_dir, tmp_path):
    from safetensors.numpy import load_file

    worker, root, batch = run
    out = export_hf(root, tmp_path / "hf")
    got, init = (
        load_file(str(out / "model.safetensors")),
        load_file(str(model_dir / "model.safetensors")),
    )
    assert got.keys() == init.keys()
    assert max(float(np.abs(got[k] - init[k]).max()) for k in got) > 1e-3, "untrained weights"
    assert (out / "generation_config.json").is_file()
    _assert_same_model(worker, batch, out)


def test_jax_cli_export_of_a_step(run, tmp_path):
    from safetensors.numpy import load_file

    _, root, _ = run
    assert main(["export", str(root / "step_2"), str(tmp_path / "a")]) == 0
    assert main(["export", str(root / "step_1" / "policy"), str(tmp_path / "b")]) == 0
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert max(float(np.abs(a[k] - b[k]).max()) for k in a) > 1e-4  # step 2 is not step 1
    assert main(["export", str(root), str(tmp_path / "a")]) == 2  # not empty, no --force


TEMPLATE = (  # a template other than the tiny tokenizer's own (testing.CHAT_TEMPLATE)
    "{%- for m in messages %}{{- '### ' + m['role'] + ': ' + m['content'] + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '### assistant: ' }}{%- endif %}"
)


def _export_with(run, model_dir: Path, tmp_path: Path, **tokenizer) -> Path:
    """The trained weights checkpointed with ``tokenizer`` (``tokenizer_name``,
    ``chat_template``) and exported from that checkpoint."""
    worker = run[0]
    policy = tmp_path / "policy"
    jax_ckpt.save_checkpoint(policy, worker.params, worker.opt_state, 2, None, str(model_dir),
                             **tokenizer)  # fmt: skip
    return jax_ckpt.export_hf(policy, tmp_path / "hf")


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _template_sources(folder: Path) -> tuple[bool, bool]:
    """(chat_template.jinja exists, tokenizer_config.json has a chat_template key)."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    return (folder / "chat_template.jinja").is_file(), "chat_template" in config


@pytest.mark.parametrize("given", ["text", "file", "plain", "default"])
def test_jax_export_carries_the_configured_chat_template(run, model_dir, tmp_path, given):
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    value = {"text": TEMPLATE, "file": str(tmp_path / "t.jinja"), "plain": "plain"}.get(given)
    out = _export_with(run, model_dir, tmp_path, chat_template=value)
    want = {"plain": None, "default": testing.CHAT_TEMPLATE}.get(given, TEMPLATE)
    assert _tokenizer(out).chat_template == want
    if given in ("text", "file"):
        assert _template_sources(out) == (True, False)  # nothing that could override it
    if given == "plain":
        assert _template_sources(out) == (False, False)


def test_jax_export_carries_tokenizer_name_not_the_models_tokenizer(run, model_dir, tmp_path):
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (tok / name).write_bytes((model_dir / name).read_bytes())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": TEMPLATE, "model_max_length": 777})
    )
    got = _tokenizer(_export_with(run, model_dir, tmp_path, tokenizer_name=str(tok)))
    assert (got.chat_template, got.model_max_length) == (TEMPLATE, 777)


def test_the_worker_checkpoints_its_configured_tokenizer(model_dir, tmp_path):
    """JaxPolicyConfig.tokenizer_name / chat_template reach the checkpoint's hf/ folder."""
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    worker = JaxPolicyWorker({"model_name": str(model_dir), "precision": "float32",
                              "reference_policy": False, "tokenizer_name": str(model_dir),
                              "chat_template": str(tmp_path / "t.jinja")})  # fmt: skip
    worker.save_checkpoint(str(tmp_path / "policy"))
    assert _tokenizer(tmp_path / "policy" / "hf").chat_template == TEMPLATE


def test_the_run_config_maps_the_tokenizer_keys(tmp_path):
    from dockyard.core.config import load_config
    from dockyard.jax.config import JaxPolicyConfig
    from dockyard.train.algorithms.configs import worker_config

    quickstart = Path(__file__).resolve().parents[2] / "examples/configs/grpo_quickstart.yaml"
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    jax_on = ["policy.jax_cfg.enabled=true", "policy.dtensor_cfg.enabled=false"]
    overrides = [f"policy.tokenizer.chat_template={tmp_path / 't.jinja'}",
                 f"policy.tokenizer.name={tmp_path}"]  # fmt: skip
    cfg = JaxPolicyConfig(**worker_config(load_config(quickstart, [*jax_on, *overrides])))
    assert (cfg.chat_template, cfg.tokenizer_name) == (TEMPLATE, str(tmp_path))
    cfg = JaxPolicyConfig(**worker_config(load_config(quickstart, jax_on)))
    assert (cfg.chat_template, cfg.tokenizer_name) == (None, None)
