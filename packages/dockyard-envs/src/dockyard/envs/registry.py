"""Environments and datasets by name: the one registry behind ``env.<name>.type`` and
``data.dataset_name`` (``dockyard train``, ``dockyard config check``, the k8s renderer).

An environment is an :class:`EnvSpec`: a ``"module:attr"`` target (the class, or any callable
returning an :class:`~dockyard.core.interfaces.environment.Environment`), imported only when
that environment is built, so naming one never imports another's dependencies; whether it
``needs_sandbox`` (it scores through the sandbox service: the trainer then starts a sandbox
fleet unless ``env.<name>.sandbox_urls`` is set, and the k8s renderer points it at the sandbox
Service); and a one-line description. A dataset is a :class:`DatasetSpec` whose target is a
function ``(split: "train" | "val", **options) -> list[dict]`` of task dicts.

To add one:

* **in dockyard-envs**: a row in :data:`ENVIRONMENTS` / :data:`DATASETS` below;
* **from any other package** (it needs to depend only on ``dockyard-envs``): an entry point in
  the group ``dockyard.environments`` / ``dockyard.datasets``, named as the environment /
  dataset, that loads to its spec. Install the package and every process sees it (Ray actors
  included): no edit to dockyard, nothing to call at start-up::

      # pyproject.toml
      [project.entry-points."dockyard.environments"]
      countdown = "countdown_env.spec:ENV"        # ENV = EnvSpec("countdown_env.env:Countdown")
      [project.entry-points."dockyard.datasets"]
      countdown = "countdown_env.spec:DATASET"    # DATASET = DatasetSpec("countdown_env.data:tasks")

  Keep the module holding the specs light (the specs only): it is imported to read
  ``needs_sandbox`` and the description, the environment's own module only when it is built.

Entry points are read on every look-up (``importlib.metadata``, milliseconds); a spec is loaded
only for the name looked up. A name registered twice (by two packages, or a package reusing a
name of dockyard-envs) is a :class:`RegistryClashError` naming both.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dockyard.core.interfaces.environment import Environment

ENV_GROUP = "dockyard.environments"
DATASET_GROUP = "dockyard.datasets"
_HERE = "dockyard-envs"


def _check_target(target: str) -> None:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"target must be 'module:attr', got {target!r}")


@dataclass(frozen=True)
class EnvSpec:
    """One environment kind (what ``env.<name>.type`` names)."""

    target: str
    """``"module:attr"`` of the class (or factory); constructor keywords: any of ``sandbox_urls``,
    ``timeout_s`` and the environment's own ``env.<name>.options``."""
    needs_sandbox: bool = False
    """It scores through the sandbox service (needs ``sandbox_urls``)."""
    description: str = ""
    """One line for listings and error messages."""
    needs_judge: bool = False
    """Some of its reward comes from an LLM judge: the runtime builds one from the config's
    ``judge`` section and passes it as the ``judge`` keyword (:mod:`dockyard.envs.judging`)."""

    def __post_init__(self) -> None:
        _check_target(self.target)


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset (what ``data.dataset_name`` names)."""

    target: str
    """``"module:attr"`` of ``(split: "train" | "val", **options) -> list[dict]``."""
    description: str = ""
    """One line for listings and error messages."""

    def __post_init__(self) -> None:
        _check_target(self.target)


ENVIRONMENTS: dict[str, EnvSpec] = {
    "math": EnvSpec(
        "dockyard.envs.math.env:MathEnvironment",
        description="a final answer checked by math-verify",
    ),
    "mcq": EnvSpec(
        "dockyard.envs.math.env:MultipleChoiceEnvironment",
        description="multiple choice: the chosen letter against the key",
    ),
    "code": EnvSpec(
        "dockyard.envs.code.env:CodeEnvironment",
        needs_sandbox=True,
        description="HumanEval-style completions run against held-out tests",
    ),
    "swe": EnvSpec(
        "dockyard.envs.swe.env:SweEnvironment",
        needs_sandbox=True,
        description="a patch to a repository, judged by its fail-to-pass tests",
    ),
    "terminal": EnvSpec(
        "dockyard.envs.terminal.env:TerminalEnvironment",
        needs_sandbox=True,
        description="multi-turn tool use in a sandbox session",
    ),
    "swe_agent": EnvSpec(
        "dockyard.envs.swe.agent:SweAgentEnvironment",
        needs_sandbox=True,
        description="a multi-turn SWE agent in a repository, judged by its held-out tests",
    ),
    "expression": EnvSpec(
        "dockyard.envs.expression:ExpressionEnvironment",
        needs_sandbox=True,
        description="a Python expression meeting a spec (the quickstart)",
    ),
    "expression_agent": EnvSpec(
        "dockyard.envs.expression_agent:ExpressionAgentEnvironment",
        needs_sandbox=True,
        description="the expression task through check/submit tool calls (quickstart --agent)",
    ),
    "osworld": EnvSpec(
        "dockyard.envs.osworld.env:OSWorldEnvironment",
        needs_sandbox=True,
        description="computer use: a sandbox desktop driven by pyautogui actions (OSWorld)",
    ),
    "reward_model": EnvSpec(
        "dockyard.envs.reward_model:RewardModelEnvironment",
        description="a response scored by a reward model folder (what `dockyard rm` exports)",
    ),
    "hle": EnvSpec(
        "dockyard.envs.hle.env:HleEnvironment",
        description="Humanity's Last Exam: exact match / multiple choice, the judge if free-form",
        needs_judge=True,
    ),
    "gdpval": EnvSpec(
        "dockyard.envs.gdpval.env:GdpvalEnvironment",
        needs_sandbox=True,
        description="file deliverables written by a program in the sandbox, graded by a rubric",
        needs_judge=True,
    ),
    "gdpval_agentic": EnvSpec(
        "dockyard.envs.gdpval.agentic:GdpvalAgenticEnvironment",
        needs_sandbox=True,
        description="file deliverables made in a sandbox session, graded by a rubric",
        needs_judge=True,
    ),
    "harbor": EnvSpec(
        "dockyard.envs.harbor.env:HarborEnvironment",
        needs_sandbox=True,
        description="Harbor task directories (Terminal-Bench 2) in a provisioned sandbox session",
    ),
    "programbench": EnvSpec(
        "dockyard.envs.programbench.env:ProgramBenchEnvironment",
        needs_sandbox=True,
        description="cleanroom rebuild of a program from its behaviour, in a sandbox session",
    ),
    "programbench_single": EnvSpec(
        "dockyard.envs.programbench.env:ProgramBenchSingleTurnEnvironment",
        needs_sandbox=True,
        description="cleanroom rebuild of a program from its docs and runs, in one response",
    ),
}
"""The environments of dockyard-envs (others come from entry points)."""

DATASETS: dict[str, DatasetSpec] = {
    "arithmetic": DatasetSpec(
        "dockyard.envs.math.data:arithmetic_dataset", "generated arithmetic (env math)"
    ),
    "humaneval": DatasetSpec(
        "dockyard.envs.code.data:humaneval_dataset", "HumanEval, split by task id (env code)"
    ),
    "swe": DatasetSpec("dockyard.envs.swe.data:swe_dataset", "the shipped tasks (env swe)"),
    "terminal": DatasetSpec(
        "dockyard.envs.terminal.tasks:terminal_dataset", "the shipped tasks (env terminal)"
    ),
    "expression": DatasetSpec(
        "dockyard.envs.expression:load_tasks", "kind/size specs, held-out pairs (env expression)"
    ),
    "osworld": DatasetSpec(
        "dockyard.envs.osworld.data:osworld_dataset", "the shipped desktop tasks (env osworld)"
    ),
    "osworld_toy": DatasetSpec(
        "dockyard.envs.osworld.data:osworld_toy_dataset", "generated click/type tasks (env osworld)"
    ),
    "hle": DatasetSpec(
        "dockyard.envs.hle.data:hle_dataset", "HLE records from a local file (env hle)"
    ),
    "gdpval": DatasetSpec(
        "dockyard.envs.gdpval.tasks:gdpval_dataset", "the shipped deliverable tasks (env gdpval)"
    ),
    "harbor": DatasetSpec(
        "dockyard.envs.harbor.tasks:harbor_dataset", "the shipped Harbor tasks (env harbor)"
    ),
    "programbench": DatasetSpec(
        "dockyard.envs.programbench.tasks:programbench_dataset",
        "the 15 shipped cleanroom tasks (env programbench, programbench_single)",
    ),
}
"""The datasets of dockyard-envs (others come from entry points)."""


class UnknownNameError(KeyError):
    """An environment or dataset name nobody registered (the message lists the known ones)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class RegistryClashError(RuntimeError):
    """Two packages register the same name."""


@dataclass(frozen=True)
class _Source:
    """Where a name comes from: this package's table, or an entry point of a distribution."""

    origin: str
    where: str
    load: Callable[[], Any]


def _entry_point_source(ep: EntryPoint) -> _Source:
    dist = getattr(ep, "dist", None)
    origin = f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"
    return _Source(origin, f"entry point {ep.group}:{ep.name} = {ep.value}", ep.load)


def _sources(kind: str, builtin: dict[str, Any], group: str) -> dict[str, _Source]:
    """Every name of ``group``: the table here, then installed entry points (clashes raise)."""
    found = {
        name: _Source(_HERE, spec.target, lambda spec=spec: spec) for name, spec in builtin.items()
    }
    for ep in entry_points(group=group):
        new = _entry_point_source(ep)
        old = found.get(ep.name)
        if old is not None:
            raise RegistryClashError(
                f"{kind} {ep.name!r} is registered twice: by {old.origin} ({old.where}) and by "
                f"{new.origin} ({new.where}); uninstall one of the two packages"
            )
        found[ep.name] = new
    return found


def _spec(kind: str, name: str, builtin: dict[str, Any], group: str, cls: type) -> Any:
    sources = _sources(kind, builtin, group)
    if name not in sources:
        known = ", ".join(sorted(sources)) or "none"
        raise UnknownNameError(f"unknown {kind} {name!r}; known: {known}")
    source = sources[name]
    spec = source.load()
    if not isinstance(spec, cls):
        raise TypeError(
            f"{kind} {name!r} of {source.origin} ({source.where}) loads to "
            f"{type(spec).__name__}, not a dockyard.envs.registry.{cls.__name__}"
        )
    return spec


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def env_names() -> list[str]:
    """Every registered environment name, sorted (no spec is loaded)."""
    return sorted(_sources("environment", ENVIRONMENTS, ENV_GROUP))


def dataset_names() -> list[str]:
    """Every registered dataset name, sorted (no spec is loaded)."""
    return sorted(_sources("dataset", DATASETS, DATASET_GROUP))


def get_env(name: str) -> EnvSpec:
    """The spec registered as ``name``.

    Raises:
        UnknownNameError: (a KeyError) unknown name; the message lists the known ones.
        RegistryClashError: two packages register the same name.
    """
    return _spec("environment", name, ENVIRONMENTS, ENV_GROUP, EnvSpec)


def get_dataset(name: str) -> DatasetSpec:
    """The dataset spec registered as ``name`` (errors as :func:`get_env`)."""
    return _spec("dataset", name, DATASETS, DATASET_GROUP, DatasetSpec)


def needs_sandbox(name: str) -> bool:
    """Whether environment ``name`` scores through the sandbox service."""
    return get_env(name).needs_sandbox


def needs_judge(name: str) -> bool:
    """Whether environment ``name`` grades (partly) with an LLM judge."""
    return get_env(name).needs_judge


def env_factory(name: str) -> Callable[..., Environment]:
    """The class (or factory) of environment ``name``, imported now."""
    return _load(get_env(name).target)


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with ``kwargs``."""
    return env_factory(name)(**kwargs)


def load_dataset(name: str, split: str, **options: Any) -> list[dict[str, Any]]:
    """The tasks of dataset ``name`` for ``split`` (``"train"`` or ``"val"``)."""
    return _load(get_dataset(name).target)(split, **options)
