"""The config: defaults, YAML inheritance, references, overrides, every kind of error, and the
`dockyard config check` command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dockyard.core.config import (
    ClippedPGLossConfig,
    ConfigError,
    MasterConfig,
    PreferenceLossConfig,
    apply_overrides,
    config_from_dict,
    load_config,
)
from dockyard.core.rl import PolicyLoss
from dockyard.train.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "examples" / "configs" / "base.yaml"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def problems(data=None, path=None, overrides=()) -> list[str]:
    def go() -> None:
        if path is not None:
            load_config(path, overrides)
        else:
            config_from_dict(data)

    with pytest.raises(ConfigError) as e:
        go()
    return e.value.problems


def test_empty_config_validates_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "empty.yaml", ""))
    assert cfg == MasterConfig()
    assert isinstance(cfg.loss_fn, ClippedPGLossConfig)
    assert cfg.grpo.adv_estimator.name == "grpo"
    assert cfg.policy.dtensor_cfg.enabled
    assert not cfg.policy.jax_cfg.enabled
    assert cfg.data_plane.weight_transport.type == "collective"


def test_base_example_validates():
    cfg = load_config(BASE)
    assert cfg.policy.generation.vllm_cfg.max_model_len == cfg.policy.max_total_sequence_length
    assert cfg.loss_fn.type == "clipped_pg"
    assert cfg.loss_fn.ratio_clip_max == 0.28


def test_nemo_rl_key_names():
    cfg = config_from_dict(
        {
            "grpo": {
                "num_prompts_per_step": 4,
                "num_generations_per_prompt": 8,
                "max_num_steps": 3,
                "adv_estimator": {"name": "grpo", "use_leave_one_out_baseline": True},
                "async_grpo": {"enabled": True, "max_trajectory_age_steps": 2},
            },
            "loss_fn": {
                "reference_policy_kl_penalty": 0.01,
                "ratio_clip_min": 0.2,
                "ratio_clip_max": 0.28,
                "ratio_clip_c": 3.0,
                "token_level_loss": False,
                "use_importance_sampling_correction": True,
                "truncated_importance_sampling_type": "icepop",
                "truncated_importance_sampling_ratio": 2.0,
                "truncated_importance_sampling_ratio_min": 0.5,
                "sequence_level_importance_ratios": True,
            },
            "policy": {"model_name": "m", "train_global_batch_size": 32},
            "cluster": {"num_nodes": 2, "gpus_per_node": 8},
            "env": {"code": {"sandbox_urls": ["http://10.0.0.1:8080/", "https://sb"]}},
        }
    )
    assert cfg.grpo.async_grpo.age_bound() == 2
    assert cfg.env["code"].sandbox_urls == ["http://10.0.0.1:8080", "https://sb"]
    opts = cfg.loss_fn.loss_options()  # type: ignore[union-attr]
    assert opts["eps_low"] == 0.2
    assert opts["eps_high"] == 0.28
    assert opts["dual_clip_c"] == 3.0
    assert opts["sequence_level_ratio"] is True
    assert opts["agg"] == "seq-mean-token-mean"
    assert opts["is_type"] == "icepop"
    assert opts["kl_beta"] == 0.01
    assert cfg.grpo.adv_estimator.estimator_options() == {
        "normalize_std": True,
        "leave_one_out": True,
    }


def test_inheritance_and_union_replacement(tmp_path):
    write(
        tmp_path,
        "a.yaml",
        """
        policy: {model_name: base-model, train_global_batch_size: 64}
        grpo: {num_prompts_per_step: 8, num_generations_per_prompt: 8}
        loss_fn: {type: clipped_pg, ratio_clip_max: 0.28}
        logger: {tensorboard_enabled: true}
    """,
    )
    write(
        tmp_path,
        "b.yaml",
        """
        defaults: a.yaml
        grpo: {num_prompts_per_step: 16}
        logger: {log_dir: other}
    """,
    )
    child = write(
        tmp_path,
        "c.yaml",
        """
        defaults: [b.yaml]
        loss_fn: {type: dpo, beta: 0.2}
    """,
    )
    cfg = load_config(child)
    assert cfg.policy.model_name == "base-model"
    assert cfg.grpo.num_prompts_per_step == 16
    assert cfg.grpo.num_generations_per_prompt == 8
    assert cfg.logger.tensorboard_enabled
    assert cfg.logger.log_dir == "other"
    assert isinstance(cfg.loss_fn, PreferenceLossConfig)
    assert cfg.loss_fn.beta == 0.2


def test_inheritance_cycle_and_missing(tmp_path):
    write(tmp_path, "x.yaml", "defaults: y.yaml\n")
    write(tmp_path, "y.yaml", "defaults: x.yaml\n")
    assert "cycle" in problems(path=tmp_path / "x.yaml")[0]
    assert "not found" in problems(path=tmp_path / "nope.yaml")[0]


def test_overrides(tmp_path):
    path = write(
        tmp_path,
        "c.yaml",
        """
        policy: {generation: {stop_strings: [a]}}
        grpo: {num_prompts_per_step: 4, num_generations_per_prompt: 4}
        policy_note: null
    """,
    )
    cfg = load_config(
        path,
        [
            "~policy_note",
            "grpo.num_prompts_per_step=32",
            "policy.train_global_batch_size=128",
            "policy.generation.stop_strings=[x, '</answer>']",
            "policy.max_grad_norm=null",
            'policy.model_name="001"',
            "loss_fn.ratio_clip_max=0.28",
            "env.code.sandbox_urls=[http://a:1]",
        ],
    )
    assert cfg.grpo.num_prompts_per_step == 32
    assert cfg.policy.generation.stop_strings == ["x", "</answer>"]
    assert cfg.policy.max_grad_norm is None
    assert cfg.policy.model_name == "001"
    assert cfg.env["code"].sandbox_urls == ["http://a:1"]
    # changing a union's tag drops the other variant's keys from files
    out = apply_overrides(
        {"loss_fn": {"type": "clipped_pg", "ratio_clip_c": 3}}, ["loss_fn.type=cispo"]
    )
    assert out == {"loss_fn": {"type": "cispo"}}
    assert "not key.path=value" in problems(path=path, overrides=["grpo.num_prompts_per_step"])[0]
    assert "not a mapping" in problems(path=path, overrides=["grpo.num_prompts_per_step.x=1"])[0]


def test_references(tmp_path):
    path = write(
        tmp_path,
        "r.yaml",
        """
        policy: {max_total_sequence_length: 2048, generation: {vllm_cfg: {max_model_len: "${policy.max_total_sequence_length}"}}}
        logger: {log_dir: "logs/seed-${grpo.seed}"}
    """,
    )
    cfg = load_config(path)
    assert cfg.policy.generation.vllm_cfg.max_model_len == 2048
    assert cfg.logger.log_dir == "logs/seed-42"
    bad = write(tmp_path, "bad.yaml", 'logger: {log_dir: "${nope.key}"}\n')
    assert "nope.key" in problems(path=bad)[0]


def test_unknown_keys_name_full_path_and_closest_key():
    ps = problems(
        {
            "grpo": {"num_prompt_per_step": 3, "async_grpo": {"max_trajectory_age": 1}},
            "loss_fn": {"ratio_clip_mx": 0.3},
            "policy": {
                "num_generations_per_prompt": 4,
                "generation": {"vllm_cfg": {"gpu_mem_util": 0.5}},
            },
            "env": {"code": {"sandbox_url": ["http://x"]}},
            "grpo_typo": {},
        }
    )
    joined = "\n".join(ps)
    assert len(ps) == 7, joined
    assert "grpo.num_prompt_per_step: unknown key; did you mean 'num_prompts_per_step'?" in joined
    assert (
        "grpo.async_grpo.max_trajectory_age: unknown key; did you mean 'max_trajectory_age_steps'?"
        in joined
    )
    assert "loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?" in joined
    assert (
        "policy.num_generations_per_prompt: unknown key; did you mean 'grpo.num_generations_per_prompt'?"
        in joined
    )
    assert "policy.generation.vllm_cfg.gpu_mem_util: unknown key" in joined
    assert "env.code.sandbox_url: unknown key; did you mean 'sandbox_urls'?" in joined
    assert "grpo_typo: unknown key; did you mean 'grpo'?" in joined


def test_a_key_of_another_union_member_names_the_members_that_have_it():
    """Not "did you mean" the key itself: the section's other types that take it."""
    ps = problems(
        {
            "data_plane": {"weight_transport": {"type": "shm", "port": 5, "shm_dri": "/x"}},
            "grpo": {"adv_estimator": {"name": "grpo", "teachers": []}},
        }
    )
    assert (
        "data_plane.weight_transport.port: unknown key; 'port' is a key of "
        "data_plane.weight_transport with type: http, not with this type"
    ) in ps
    assert "data_plane.weight_transport.shm_dri: unknown key; did you mean 'shm_dir'?" in ps
    assert (
        "grpo.adv_estimator.teachers: unknown key; 'teachers' is a key of grpo.adv_estimator "
        "with name: opd, not with this name"
    ) in ps


def test_wrong_types_name_expected_type():
    ps = problems(
        {
            "grpo": {"num_prompts_per_step": "many"},
            "policy": {"dtensor_cfg": {"enabled": "maybe"}},
            "loss_fn": {"reference_policy_kl_type": "k4"},
        }
    )
    joined = "\n".join(ps)
    assert "grpo.num_prompts_per_step: expected int, got 'many' (str)" in joined
    assert "policy.dtensor_cfg.enabled: expected bool, got 'maybe'" in joined
    assert "loss_fn.reference_policy_kl_type: expected one of 'k1', 'k2', 'k3', got 'k4'" in joined
    ps = problems({"grpo": {"adv_estimator": {"name": "grpoo"}}})
    assert (
        "grpo.adv_estimator.name: unknown advantage estimator 'grpoo' (did you mean 'grpo'?)"
        in (ps[0])
    )
    assert "entry-point group 'dockyard.advantages'" in ps[0]


def test_mutually_exclusive_and_ignored_options():
    joined = "\n".join(problems({"policy": {"jax_cfg": {"enabled": True}}}))
    assert "policy.dtensor_cfg.enabled and policy.jax_cfg.enabled are both true" in joined
    joined = "\n".join(problems({"policy": {"dtensor_cfg": {"enabled": False}}}))
    assert "neither policy.dtensor_cfg.enabled nor policy.jax_cfg.enabled" in joined
    cases = [
        (
            {"grpo": {"async_grpo": {"max_trajectory_age_steps": 4}}},
            "grpo.async_grpo.enabled is false",
        ),
        (
            {"loss_fn": {"truncated_importance_sampling_ratio": 2.0}},
            "use_importance_sampling_correction is false",
        ),
        (
            {
                "loss_fn": {
                    "use_importance_sampling_correction": True,
                    "truncated_importance_sampling_type": "icepop",
                }
            },
            "needs loss_fn.truncated_importance_sampling_ratio",
        ),
        ({"loss_fn": {"sequence_level_importance_ratios": True}}, "token_level_loss: false"),
        ({"grpo": {"dynamic_sampling_max_gen_batches": 3}}, "grpo.use_dynamic_sampling is false"),
        (
            {
                "policy": {
                    "generation": {"backend": "transformers", "vllm_cfg": {"enforce_eager": True}}
                }
            },
            "policy.generation.vllm_cfg is set but",
        ),
        ({"logger": {"wandb": {"project": "p"}}}, "logger.wandb_enabled is false"),
        (
            {"grpo": {"num_prompts_per_step": 3, "num_generations_per_prompt": 5}},
            "multiple of policy.train_global_batch_size",
        ),
        ({"env": {"code": {"sandbox_urls": ["localhost:8080"]}}}, "must start with http://"),
        ({"env": {"a": {}}, "data": {"env_name": "b"}}, "data.env_name 'b' is not an entry of env"),
        (
            {"loss_fn": {"ratio_clip_c": 0.5}},
            "loss_fn.ratio_clip_c: Input should be greater than 1",
        ),
    ]
    for data, needle in cases:
        joined = "\n".join(problems(data))
        assert needle in joined, (data, joined)
    # synchronous GRPO written as age 0 is fine
    assert (
        config_from_dict(
            {"grpo": {"async_grpo": {"max_trajectory_age_steps": 0}}}
        ).grpo.async_grpo.age_bound()
        == 0
    )


def test_loss_config_builds_each_policy_loss():
    for t in ("clipped_pg", "cispo"):
        cfg = config_from_dict({"loss_fn": {"type": t}})
        assert PolicyLoss.from_config(cfg.loss_fn).name == t


def test_cli_check_ok_and_errors(tmp_path, capsys):
    assert (
        main(
            [
                "config",
                "check",
                str(BASE),
                "grpo.num_prompts_per_step=16",
                "policy.train_global_batch_size=128",
                "--format",
                "json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["grpo"]["num_prompts_per_step"] == 16
    assert main(["config", "check", str(BASE), "grpo.num_prompt_per_step=16"]) == 2
    err = capsys.readouterr().err
    assert "grpo.num_prompt_per_step: unknown key; did you mean 'num_prompts_per_step'?" in err


def test_cli_subprocess_exit_codes_and_no_heavy_imports(tmp_path):
    bad = write(tmp_path, "bad.yaml", "policy: {jax_cfg: {enabled: true}}\n")
    code = (
        "import sys; from dockyard.train.cli import main; rc = main(sys.argv[1:]); "
        "heavy = [m for m in ('torch', 'jax', 'ray', 'vllm') if m in sys.modules]; "
        "assert not heavy, heavy; sys.exit(rc)"
    )
    ok = subprocess.run(
        [sys.executable, "-c", code, "config", "check", str(BASE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "num_prompts_per_step" in ok.stdout
    err = subprocess.run(
        [sys.executable, "-c", code, "config", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert err.returncode == 2
    assert "policy.jax_cfg.enabled" in err.stderr


def test_core_imports_no_heavy_frameworks():
    code = (
        "import sys, dockyard.core, dockyard.core.config, dockyard.core.rl, dockyard.core.interfaces, "
        "dockyard.core.experience, dockyard.core.config.docs; "
        "print([m for m in ('torch', 'jax', 'jaxlib', 'ray', 'vllm') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "configs").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_config_validates(path):
    load_config(path)
