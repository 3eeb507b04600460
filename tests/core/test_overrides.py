"""The loader's Hydra override grammar, OmegaConf interpolation, YAML file errors and
``${config_dir:}``: one test per form and per error, each asserting the value or the message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from dockyard.core.config import (
    CISPOLossConfig,
    ConfigError,
    MasterConfig,
    apply_overrides,
    load_config,
    load_yaml,
)
from dockyard.core.config.loader import resolve_defaults, resolve_references

FILE = """
grpo: {seed: 7, num_prompts_per_step: 4, num_generations_per_prompt: 4}
policy: {model_name: m, train_global_batch_size: 16, generation: {stop_strings: [a]}}
logger: {log_dir: from-file}
"""
DATA = yaml.safe_load(FILE)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def cfg_file(tmp_path: Path) -> Path:
    return write(tmp_path, "c.yaml", FILE)


def error(fn, *args) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fn(*args)
    return e.value


def override_error(*overrides: str, data: dict | None = None) -> ConfigError:
    e = error(apply_overrides, DATA if data is None else data, overrides)
    assert e.source == "<overrides>"
    return e


# ---------------------------------------------------------------- the grammar


def test_set_changes_a_key_from_the_files_or_a_schema_default(cfg_file):
    cfg = load_config(cfg_file, ["grpo.seed=3", "policy.train_global_batch_size=8"])
    assert cfg.grpo.seed == 3
    assert cfg.policy.train_global_batch_size == 8


def test_plus_adds_a_key_the_files_do_not_set(cfg_file):
    assert load_config(cfg_file, ["+policy.max_grad_norm=0.5"]).policy.max_grad_norm == 0.5


def test_plus_refuses_a_key_the_files_set(cfg_file):
    e = override_error("+grpo.seed=3")
    (p,) = e.problems
    assert "'+grpo.seed=3'" in p
    assert "grpo.seed is already set (7)" in p
    assert "write grpo.seed=3 to change it, or ++grpo.seed=3" in p


def test_plus_plus_adds_or_sets(cfg_file):
    cfg = load_config(cfg_file, ["++grpo.seed=3", "++policy.max_grad_norm=0.5"])
    assert (cfg.grpo.seed, cfg.policy.max_grad_norm) == (3, 0.5)


def test_tilde_deletes_a_key_so_the_schema_default_applies(cfg_file):
    cfg = load_config(cfg_file, ["~logger.log_dir"])
    assert cfg.logger.log_dir == MasterConfig().logger.log_dir


@pytest.mark.parametrize("override", ["~logger.nope", "~missing.key"])
def test_tilde_refuses_a_key_the_files_do_not_set(override):
    (p,) = override_error(override).problems
    key = override[1:]
    assert f"override {override!r}: {key} is not set in the config files" in p
    assert "drop the override" in p


def test_tilde_with_a_value_deletes_only_that_value():
    out = apply_overrides(DATA, ["~grpo.seed=7"])
    assert "seed" not in out["grpo"]
    (p,) = override_error("~grpo.seed=8").problems
    assert "'~grpo.seed=8': grpo.seed is 7, not 8; write ~grpo.seed to delete it" in p


@pytest.mark.parametrize("override", ["policy.model_name='8'", 'policy.model_name="8"'])
def test_quoted_value_stays_a_string(cfg_file, override):
    assert load_config(cfg_file, [override]).policy.model_name == "8"


def test_unquoted_number_is_a_number():
    assert apply_overrides({}, ["policy.model_name=8"]) == {"policy": {"model_name": 8}}


def test_list_value_replaces_the_list(cfg_file):
    cfg = load_config(cfg_file, ["policy.generation.stop_strings=[x, '</answer>', 'a b']"])
    assert cfg.policy.generation.stop_strings == ["x", "</answer>", "a b"]


def test_dict_value_merges_into_the_mapping(cfg_file):
    out = apply_overrides(DATA, ["grpo={seed: 1, max_num_steps: 5}"])
    assert out["grpo"] == {
        "seed": 1,
        "num_prompts_per_step": 4,
        "num_generations_per_prompt": 4,
        "max_num_steps": 5,
    }


def test_null_sets_none(cfg_file):
    assert load_config(cfg_file, ["policy.max_grad_norm=null"]).policy.max_grad_norm is None


def test_empty_value_is_the_empty_string():
    assert apply_overrides({}, ["++logger.log_dir="]) == {"logger": {"log_dir": ""}}
    assert apply_overrides({}, ["logger.log_dir="]) == {"logger": {"log_dir": ""}}


def test_interpolation_in_an_override(cfg_file):
    cfg = load_config(cfg_file, ["logger.log_dir=runs/seed-${grpo.seed}"])
    assert cfg.logger.log_dir == "runs/seed-7"


def test_setting_a_union_tag_drops_the_old_variants_keys(tmp_path):
    path = write(tmp_path, "l.yaml", "loss_fn: {type: clipped_pg, ratio_clip_c: 3.0}\n")
    assert apply_overrides(load_yaml(path), ["loss_fn.type=cispo"]) == {
        "loss_fn": {"type": "cispo"}
    }
    assert isinstance(load_config(path, ["loss_fn.type=cispo"]).loss_fn, CISPOLossConfig)


# ---------------------------------------------------------------- refused overrides


@pytest.mark.parametrize(
    ("override", "kind", "example"),
    [
        ("grpo.seed=1,2", "simple choice", "e.g. grpo.seed=1"),
        ("grpo.seed=choice(1,2)", "choice", "e.g. grpo.seed=1"),
        ("grpo.seed=range(1,3)", "range", "e.g. grpo.seed=1"),
        ("grpo.seed=interval(0,1)", "interval", "grpo.seed=VALUE"),
        ("policy.model_name=glob(*)", "glob choice", "policy.model_name=VALUE"),
    ],
)
def test_sweeps_are_refused(override, kind, example):
    (p,) = override_error(override).problems
    assert f"override {override!r} is a Hydra sweep ({kind})" in p
    assert f"dockyard runs one: give one value ({example})" in p


def test_shuffle_is_refused_and_sort_is_deterministic():
    (p,) = override_error("policy.generation.stop_strings=shuffle([a,b])").problems
    assert "shuffle() gives a different order on every run" in p
    assert apply_overrides({}, ["policy.generation.stop_strings=sort([b,a])"]) == {
        "policy": {"generation": {"stop_strings": ["a", "b"]}}
    }


@pytest.mark.parametrize("override", ["loss_fn@pkg=cispo", "loss/cispo=x"])
def test_config_group_syntax_is_refused(override):
    (p,) = override_error(override).problems
    assert f"override {override!r} uses Hydra's config-group syntax" in p
    assert "set keys by dotted path (a.b=value)" in p


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("grpo..seed=1", "unexpected '.'"),
        ("grpo.seed=[1,2", "no viable alternative at input '[1,2'"),
    ],
)
def test_unparsable_override_names_it_and_the_syntax(override, reason):
    (p,) = override_error(override).problems
    assert f"override {override!r} does not parse ({reason}" in p
    assert "+key.path=value to add, ++key.path=value to add or set, ~key.path to delete" in p


@pytest.mark.parametrize("override", ["grpo.seed", "=1", "~"])
def test_override_without_key_or_value(override):
    (p,) = override_error(override).problems
    assert repr(override) in p
    assert "key.path=value" in p


def test_path_through_a_scalar_or_a_list():
    (p,) = override_error("grpo.seed.x=1").problems
    assert "'grpo.seed.x=1': grpo.seed is int, not a mapping" in p
    (p,) = override_error("policy.generation.stop_strings.0=x").problems
    assert "set the whole list: policy.generation.stop_strings=[...]" in p


def test_every_bad_override_is_reported_at_once():
    e = override_error("~nope", "grpo.seed=1,2", "grpo.seed=3")
    assert len(e.problems) == 2
    assert "'~nope'" in e.problems[0]
    assert "'grpo.seed=1,2'" in e.problems[1]


# ---------------------------------------------------------------- interpolation


def test_reference_to_an_unset_key_takes_the_schema_default(tmp_path):
    path = write(tmp_path, "r.yaml", 'logger: {log_dir: "seed-${grpo.seed}"}\n')
    assert load_config(path).logger.log_dir == f"seed-{MasterConfig().grpo.seed}"


def test_reference_into_a_changed_union_does_not_see_the_old_variant():
    e = error(
        resolve_references,
        {"loss_fn": {"type": "dpo"}, "logger": {"log_dir": "${loss_fn.ratio_clip_max}"}},
    )
    assert e.problems[0].startswith("logger.log_dir: cannot resolve '${loss_fn.ratio_clip_max}'")


def test_env_interpolation_with_default(tmp_path, monkeypatch):
    path = write(tmp_path, "e.yaml", 'logger: {log_dir: "${oc.env:DOCKYARD_TEST_LOGS,fallback}"}\n')
    monkeypatch.delenv("DOCKYARD_TEST_LOGS", raising=False)
    assert load_config(path).logger.log_dir == "fallback"
    monkeypatch.setenv("DOCKYARD_TEST_LOGS", "/from/env")
    assert load_config(path).logger.log_dir == "/from/env"


def test_env_interpolation_without_default_names_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKYARD_TEST_LOGS", raising=False)
    path = write(tmp_path, "e.yaml", 'logger: {log_dir: "${oc.env:DOCKYARD_TEST_LOGS}"}\n')
    e = error(load_config, path)
    assert e.source == str(path)
    (p,) = e.problems
    assert p.startswith("logger.log_dir: cannot resolve '${oc.env:DOCKYARD_TEST_LOGS}'")
    assert "Environment variable 'DOCKYARD_TEST_LOGS' not found" in p


def test_missing_key_and_cycle_and_bad_syntax_name_the_key():
    e = error(
        resolve_references,
        {"a": "${nope.key}", "b": "${c}", "c": "${b}", "d": "${unclosed"},
    )
    joined = "\n".join(e.problems)
    assert "a: cannot resolve '${nope.key}': Interpolation key 'nope.key' not found" in joined
    assert "b: cannot resolve '${c}': Recursive interpolation detected" in joined
    assert "c: cannot resolve '${b}': Recursive interpolation detected" in joined
    assert "d: '${unclosed' is not a valid interpolation" in joined


def test_escaped_interpolation_is_literal_text():
    assert resolve_references({"logger": {"log_dir": r"\${HOME}"}}) == {
        "logger": {"log_dir": "${HOME}"}
    }


# ---------------------------------------------------------------- files


def test_yaml_error_names_file_line_and_column(tmp_path):
    path = write(tmp_path, "bad.yaml", "grpo:\n  seed: [1, 2}\n")
    e = error(load_config, path)
    assert e.source == str(path)
    assert e.problems[0].startswith(f"{path}:2:14: expected ',' or ']', but got '}}'")
    assert "<unicode string>" not in str(e)


def test_duplicate_yaml_key_is_an_error(tmp_path):
    path = write(tmp_path, "dup.yaml", "grpo:\n  seed: 1\n  seed: 2\n")
    (p,) = error(load_config, path).problems
    assert p == f"{path}:3:3: duplicate key 'seed' (first set on line 2)"


def test_missing_defaults_file_names_the_chain(tmp_path):
    write(tmp_path, "a.yaml", "defaults: b.yaml\n")
    b = write(tmp_path, "b.yaml", "defaults: [missing.yaml]\n")
    e = error(load_config, tmp_path / "a.yaml")
    assert e.source == str(b)
    (p,) = e.problems
    assert f"file not found: {tmp_path / 'missing.yaml'} (named in {b}" in p
    assert "chain: a.yaml -> b.yaml -> missing.yaml" in p


def test_defaults_cycle_names_the_chain(tmp_path):
    write(tmp_path, "x.yaml", "defaults: y.yaml\n")
    write(tmp_path, "y.yaml", "defaults: x.yaml\n")
    (p,) = error(load_config, tmp_path / "x.yaml").problems
    assert p == "defaults: cycle in defaults: x.yaml -> y.yaml -> x.yaml"


def test_config_dir_is_the_folder_of_the_file_it_is_written_in(tmp_path, monkeypatch):
    write(tmp_path, "base/base.yaml", 'data: {train_path: "${config_dir:}/train.jsonl"}\n')
    child = write(
        tmp_path,
        "runs/child.yaml",
        'defaults: ../base/base.yaml\nlogger: {log_dir: "${config_dir:}/logs"}\n',
    )
    monkeypatch.chdir(tmp_path / "base")  # any working directory
    cfg = load_config(child)
    assert cfg.data.train_path == str((tmp_path / "base" / "train.jsonl").resolve())
    assert cfg.logger.log_dir == str((tmp_path / "runs" / "logs").resolve())


def test_config_dir_of_an_inline_mapping_is_its_base_dir(tmp_path):
    out = resolve_defaults({"logger": {"log_dir": "${config_dir:}/logs"}}, tmp_path)
    assert out == {"logger": {"log_dir": f"{tmp_path.resolve()}/logs"}}


def test_config_dir_in_an_override_is_refused(cfg_file):
    (p,) = error(load_config, cfg_file, ["logger.log_dir=${config_dir:}/x"]).problems
    assert p.startswith("logger.log_dir: cannot resolve '${config_dir:}/x'")
    assert "works only in a config file" in p
