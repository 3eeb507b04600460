"""A GRPO checkpoint exported as a Hugging Face folder: `export_hf` and `dockyard export`.

The checkpoint is written the way the GRPO loop writes one (`recovery.save_run`):
`step_<n>/policy/` by the worker's `save_checkpoint`, `driver.pkl`, then `done`. The exported
folder must load offline with `AutoModelForCausalLM` / `AutoTokenizer` and give the trainer's
logits and greedy generations; with LoRA the adapters are merged. Its tokenizer is the one
training used: `tokenizer_name`'s, with `policy.tokenizer.chat_template` in place of its own
template (from the worker's live `export_hf` and from a checkpoint alike).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch import checkpoint as torch_ckpt
from dockyard.torch.config import TorchPolicyConfig
from dockyard.torch.testing import CHAT_TEMPLATE, random_batch
from dockyard.torch.worker import TorchPolicyWorker
from dockyard.train import checkpoint as ckpt
from dockyard.train.cli import main
from dockyard.train.export import ExportError, export_hf

PROMPTS = ["What is 12 + 30?", "Write a function that adds two numbers.", "Say hello."]


def _save_step(worker: TorchPolicyWorker, root: Path, step: int) -> Path:
    """What `recovery.save_run` writes for ``step``, without the Ray stack around it."""
    folder = ckpt.step_dir(root, step)
    folder.mkdir(parents=True)
    worker.save_checkpoint(str(folder / "policy"), {"step": step})
    ckpt.save_driver_state(folder, {"step": step, "history": []})
    ckpt.mark_done(folder)
    return folder


def _train_and_save(config: dict, root: Path) -> TorchPolicyWorker:
    """Two optimizer steps, a checkpoint after each (``step_1``, ``step_2``)."""
    worker = TorchPolicyWorker({**config, "reference_policy": False})
    batch = random_batch(6, 24, seed=5)
    for step in (1, 2):
        worker.train_step(batch, MaskedNLLLoss())
        _save_step(worker, root, step)
    worker.model.eval()
    return worker


def _load(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model, tok


def _prompt_ids(tok) -> list[torch.Tensor]:
    out = []
    for text in PROMPTS:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        out.append(torch.as_tensor(tok(ids)["input_ids"])[None])
    return out


def _greedy(model, ids: torch.Tensor, pad: int) -> list[int]:
    with torch.no_grad():
        seq = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=16,
            do_sample=False,
            use_cache=True,
            pad_token_id=pad,
        )
    return seq[0, ids.shape[1] :].tolist()


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits[0].float()


def _assert_same_model(worker: TorchPolicyWorker, folder: Path) -> None:
    """The exported folder gives the trainer's logits and greedy generations."""
    model, tok = _load(folder)
    assert tok.chat_template, "the export lost the chat template"
    for ids in _prompt_ids(tok):
        torch.testing.assert_close(_logits(model, ids), _logits(worker.model, ids),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
        assert _greedy(model, ids, tok.pad_token_id) == _greedy(worker.model, ids,
                                                                tok.pad_token_id)  # fmt: skip


def _tensors(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    out: dict[str, np.ndarray] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _max_change(folder: Path, init: Path) -> float:
    got, base = _tensors(folder), _tensors(init)
    return max(float(np.abs(got[k] - base[k]).max()) for k in got)


@pytest.fixture(scope="module")
def run(base_config, tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo") / "checkpoints"
    return _train_and_save({**base_config, "optimizer": {"lr": 1e-2}}, root), root


def test_export_of_the_checkpoint_dir_is_the_trained_model(run, qwen2_path, tmp_path):
    worker, root = run
    (root / "step_3").mkdir()  # a save cut short: no `done`, so not the latest
    out = export_hf(root, tmp_path / "hf")
    assert (out / "config.json").is_file()
    assert (out / "generation_config.json").is_file()
    assert _max_change(out, qwen2_path) > 1e-3, "the export holds the untrained weights"
    assert _max_change(export_hf(root / "step_1", tmp_path / "s1"), out) > 1e-4  # the newest
    _assert_same_model(worker, out)
    assert not list(tmp_path.glob(".*")), "temporary folders left behind"


def test_cli_exports_a_step_and_its_policy_folder(run, tmp_path, capsys):
    worker, root = run
    assert main(["export", str(root / "step_2"), str(tmp_path / "a")]) == 0
    assert main(["export", str(root / "step_2" / "policy"), str(tmp_path / "b")]) == 0
    assert "wrote" in capsys.readouterr().out
    a, b = _tensors(tmp_path / "a"), _tensors(tmp_path / "b")
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    _assert_same_model(worker, tmp_path / "b")


def test_cli_errors_are_one_line_and_exit_2(run, tmp_path, capsys):
    _, root = run
    (tmp_path / "empty").mkdir()
    (tmp_path / "partial" / "step_4" / "policy").mkdir(parents=True)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    cases = {
        "not a checkpoint": [str(tmp_path / "empty"), str(tmp_path / "o1")],
        "no such folder": [str(tmp_path / "missing"), str(tmp_path / "o2")],
        "none of its step_<n> folders is complete": [str(tmp_path / "partial"), str(tmp_path)],
        "incomplete checkpoint": [str(tmp_path / "partial" / "step_4"), str(tmp_path / "o3")],
        "exists and is not empty": [str(root), str(taken)],
    }
    for message, argv in cases.items():
        assert main(["export", *argv]) == 2, message
        err = capsys.readouterr().err
        assert message in err, err
        assert "Traceback" not in err
        assert err.count("\n") == 1, err
    assert (taken / "keep.txt").exists()
    assert main(["export", str(root), str(taken), "--force"]) == 0
    assert not (taken / "keep.txt").exists()
    assert (taken / "config.json").exists()


def test_a_failed_export_leaves_no_folder(run, tmp_path, monkeypatch):
    import dockyard.torch.checkpoint as torch_ckpt

    def crash(policy, out):
        Path(out).mkdir()
        (Path(out) / "config.json").write_text("{}")
        raise RuntimeError("killed mid-export")

    _, root = run
    monkeypatch.setattr(torch_ckpt, "export_hf", crash)
    with pytest.raises(RuntimeError, match="killed"):
        export_hf(root, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExportError, match="not a checkpoint"):
        export_hf(tmp_path, tmp_path / "hf")


def test_lora_checkpoint_exports_merged_weights(base_config, qwen2_path, tmp_path):
    lora = {"enabled": True, "rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    cfg = {**base_config, "optimizer": {"lr": 1e-2}, "lora": lora}
    worker = _train_and_save(cfg, tmp_path / "checkpoints")
    assert (tmp_path / "checkpoints" / "step_2" / "policy" / "hf" / "adapter_config.json").exists()
    out = export_hf(tmp_path / "checkpoints", tmp_path / "hf")
    tensors = _tensors(out)
    assert not any("lora" in k or "base_layer" in k for k in tensors)
    base = _tensors(qwen2_path)
    assert tensors.keys() == base.keys()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert np.abs(tensors[q] - base[q]).max() > 1e-4, "the adapters were not merged"
    _assert_same_model(worker, out)


@pytest.mark.slow
def test_checkpoint_saved_by_two_fsdp_ranks_exports_on_one_process(base_config, tmp_path):
    """tests/torch/_dist_job.py checkpoints after step 1 on 2 FSDP2 ranks (DCP shards); the
    export, on this one process, holds exactly the weights the ranks had then."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {k: v for k, v in base_config.items() if k != "model_name"}
    job = Path(__file__).with_name("_dist_job.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={port}", str(job), str(tmp_path), base_config["model_name"],
           json.dumps({**config, "reference_policy": False})]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    out = export_hf(tmp_path / "ckpt", tmp_path / "exported")
    got, want = _tensors(out), dict(np.load(tmp_path / "w1.npz"))
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


TEMPLATE = (  # a template other than the tiny tokenizer's own (CHAT_TEMPLATE)
    "{%- for m in messages %}{{- '### ' + m['role'] + ': ' + m['content'] + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '### assistant: ' }}{%- endif %}"
)


def _both_exports(config: dict, tmp_path: Path) -> list[Path]:
    """The worker's live export and the export of its checkpoint (no training needed)."""
    worker = TorchPolicyWorker({**config, "reference_policy": False})
    live = Path(worker.export_hf(str(tmp_path / "live")))
    worker.save_checkpoint(str(tmp_path / "policy"))
    return [live, torch_ckpt.export_hf(tmp_path / "policy", tmp_path / "from_ckpt")]


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _template_sources(folder: Path) -> tuple[bool, bool]:
    """(chat_template.jinja exists, tokenizer_config.json has a chat_template key)."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    return (folder / "chat_template.jinja").is_file(), "chat_template" in config


@pytest.mark.parametrize("given", ["text", "file"])
def test_a_configured_chat_template_is_the_exported_one(base_config, tmp_path, given):
    value = TEMPLATE
    if given == "file":
        (tmp_path / "t.jinja").write_text(TEMPLATE)
        value = str(tmp_path / "t.jinja")
    for out in _both_exports({**base_config, "chat_template": value}, tmp_path):
        assert _tokenizer(out).chat_template == TEMPLATE, out
        assert _template_sources(out) == (True, False), out  # nothing that could override it
    assert _template_sources(tmp_path / "policy" / "hf") == (True, False)  # in the checkpoint


def test_plain_exports_no_chat_template(base_config, tmp_path):
    for out in _both_exports({**base_config, "chat_template": "plain"}, tmp_path):
        assert _tokenizer(out).chat_template is None, out
        assert _template_sources(out) == (False, False), out


def test_by_default_the_tokenizer_keeps_its_own_template(base_config, qwen2_path, tmp_path):
    own = (qwen2_path / "tokenizer_config.json").read_text()
    for out in _both_exports(base_config, tmp_path):
        assert _tokenizer(out).chat_template == CHAT_TEMPLATE, out
        assert (out / "tokenizer_config.json").read_text() == own, out  # copied as it is


def test_the_export_carries_tokenizer_name_not_the_models_tokenizer(base_config, qwen2_path,
                                                                    tmp_path):  # fmt: skip
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (tok / name).write_bytes((qwen2_path / name).read_bytes())
    config = json.loads((qwen2_path / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": TEMPLATE, "model_max_length": 777})
    )
    cfg = {**base_config, "tokenizer_name": str(tok)}
    for out in _both_exports(cfg, tmp_path / "out"):
        got = _tokenizer(out)
        assert (got.chat_template, got.model_max_length) == (TEMPLATE, 777), out
        assert (out / "generation_config.json").is_file(), out  # still the model's


def test_the_run_config_mapping_reads_a_template_file_and_passes_the_rest(tmp_path):
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.configs import torch_worker_config

    quickstart = Path(__file__).resolve().parents[2] / "examples/configs/grpo_quickstart.yaml"
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    values = {str(tmp_path / "t.jinja"): TEMPLATE, "plain": "plain", "null": None}
    for value, want in values.items():
        cfg = load_config(quickstart, [f"policy.tokenizer.chat_template={value}"])
        assert TorchPolicyConfig(**torch_worker_config(cfg)).chat_template == want, value
    cfg = load_config(quickstart, [f"policy.tokenizer.chat_template={tmp_path / 'no.jinja'}"])
    with pytest.raises(FileNotFoundError, match="chat_template: no file"):
        torch_worker_config(cfg)
