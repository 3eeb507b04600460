"""Per-(repo, version) environments: an :class:`~dockyard.envs.swe.specs.EnvSetup` as a sandbox
:class:`~dockyard.sandbox.envspec.EnvSpec`, provisioned once and shared read-only.

The sandbox builds an ``EnvSpec`` once per content hash on its node and mounts the result's
prefix read-only at ``/opt/env`` in every jail of a task or session that names it (provision.py
of the sandbox). The spec here depends only on the setup (never on an instance), so every
instance of one (repo, version) names the same environment: one build, one cache entry.

The build holds no repository (the environments are shared by instances at different base
commits); its tree is empty and ``pip`` installs go to the prefix (``/opt/env/site``, on the
path of every test run). Each step of the setup, in SWE-bench's order (``packages``, then
``pre_install``, then ``install``), becomes:

=================================================  ==============================================
``packages`` (``pip_packages``) ``P Q``              ``pip install 'P' 'Q'`` (a ``run`` step)
``pip install ARGS`` / ``python -m pip install``     the same ``run`` step (requirements, wheels,
                                                     ``--no-index --find-links`` ...)
``pip install -e .`` / ``pip install .`` /           nothing to build: the repository is the
``python setup.py develop|install``                  workspace root, which every test run puts
                                                     first on ``sys.path`` (what an editable
                                                     install of a root-layout package gives);
                                                     its dependencies come from ``packages``
``apt-get install -y P ...``                         ``host_packages``: on the sandbox host
                                                     already, or fetched from its apt mirrors
                                                     and unpacked rootless into the prefix
                                                     (needs ``--allow-network``;
                                                     ``dockyard.sandbox.debs``)
``apt-get update`` / ``apt-get clean``               nothing (they install nothing)
any other command of *our* spec files                a ``run`` step (empty tree, prefix writable)
=================================================  ==============================================

Refused, per instance, with the step named (:class:`ProvisionRefused`; never skipped, never a
half-provisioned run): conda / mamba steps (``conda create``, ``source activate``: there is no
conda here, an environment is a pip prefix over the sandbox's Python), other system package
managers, ``pip install -e .[extras]`` and ``-r FILE`` / a ``requirements.txt`` or
``environment.yml`` of the repository (the build does not hold the repository: list the
requirements under ``packages``), steps that act on the repository (``build_ext --inplace``,
``sed -i`` on its files, any other command of a SWE-bench spec). Network: only when the
operator allows it (``network=True``, and the sandbox service runs with ``--allow-network``);
otherwise ``pip`` must find everything locally (``--no-index --find-links``), or the build fails
and is reported with its log.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.swe.specs import EnvSetup
from dockyard.sandbox.envspec import EnvSpec
from dockyard.sandbox.models import TaskResult

_CONDA = {"conda", "mamba", "micromamba", "source", ".", "activate", "deactivate"}
_SYSTEM_PM = {"apt", "yum", "dnf", "apk", "brew", "zypper", "pacman", "port"}
_SEPARATORS = {"&&", ";", "||", "|", "&", "(", ")", "\n"}
_APT_FLAGS = re.compile(r"-[a-zA-Z]+|--[a-z][a-z-]*(=\S+)?")
_APT_PKG = re.compile(r"[a-z0-9][a-z0-9+.\-]{0,127}(=\S+)?")


class ProvisionRefused(ValueError):
    """A setup step that cannot be provisioned here; the message names the step and why."""


@dataclass
class Provisioning:
    """The environment of one setup: ``spec`` (None: nothing to provision) and ``notes`` on the
    steps that needed no build (for reports)."""

    spec: EnvSpec | None
    notes: list[str] = field(default_factory=list)


def _commands(step: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ``&&``, ``;``, ``|``, ...)."""
    lex = shlex.shlex(step, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    for tok in lex:
        if tok in _SEPARATORS or set(tok) <= set("&;|()"):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def _pip_args(words: list[str]) -> list[str] | None:
    """The arguments after ``install`` of a pip command, or None if ``words`` is not one."""
    w = words
    while w and "=" in w[0] and not w[0].startswith("-"):
        w = w[1:]  # VAR=value prefixes
    if w[:1] in (["pip"], ["pip3"]):
        rest = w[1:]
    elif len(w) >= 3 and re.fullmatch(r"python[0-9.]*", w[0]) and w[1:3] == ["-m", "pip"]:
        rest = w[3:]
    else:
        return None
    return rest[1:] if rest[:1] == ["install"] else None


def _is_self(arg: str) -> bool:
    return arg in (".", "./") or arg.startswith((".[", "./["))


def _repo_install(words: list[str]) -> str | None:
    """'' when ``words`` install the repository itself without extras; a refusal reason when
    they install it with extras / from its files; None when they are not about the repository."""
    pip = _pip_args(words)
    if pip is not None:
        targets = [a for a in pip if not a.startswith("-")]
        if (
            "-r" in pip
            or "--requirement" in pip
            or any(a.startswith("-r") and len(a) > 2 for a in pip)
        ):
            return "installs a requirements file of the repository"
        if any(_is_self(a) for a in targets):
            if any("[" in a for a in targets if _is_self(a)):
                return "installs the repository's extras (their requirements are in its metadata)"
            if len(targets) > 1:
                return "installs the repository together with other packages"
            return ""
        return None
    if len(words) >= 3 and re.fullmatch(r"python[0-9.]*", words[0]) and words[1] == "setup.py":
        if words[2] in ("develop", "install"):
            return ""
        return f"runs setup.py {words[2]} on the repository"
    return None


def _step(cmd: str, where: str, ours: bool, host: list[str], notes: list[str]) -> str | None:
    """The ``run`` text of one setup command (None: nothing to build). Raises ProvisionRefused."""
    try:
        simple = _commands(cmd)
    except ValueError as e:
        raise ProvisionRefused(f"{where} {cmd!r}: not a shell command ({e})") from e
    kinds = []
    for words in simple:
        while len(words) > 1 and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]  # leading VAR=value assignments
        first = words[0]
        sub = [w for w in words[1:] if not w.startswith("-")][:1]  # apt-get's subcommand
        if first in _CONDA or first.startswith("conda"):
            raise ProvisionRefused(
                f"{where} {cmd!r}: conda steps cannot run here (no conda: an environment is a pip "
                "prefix over the sandbox's Python); write a spec without them (packages / pip)"
            )
        if first in ("apt-get", "apt") and sub in (["update"], ["clean"], ["autoclean"]):
            kinds.append("noop")
            continue
        if first in ("apt-get", "apt") and sub == ["install"]:
            pkgs = [w for w in words[1:] if not _APT_FLAGS.fullmatch(w) and w != "install"]
            if not all(_APT_PKG.fullmatch(p) for p in pkgs):
                raise ProvisionRefused(f"{where} {cmd!r}: an apt-get install of unknown form")
            host += [p.split("=")[0] for p in pkgs]
            kinds.append("noop")
            continue
        if first in _SYSTEM_PM or first in ("apt-get", "sudo"):
            raise ProvisionRefused(
                f"{where} {cmd!r}: system package steps cannot run in a provisioning jail (an "
                "unprivileged uid over a read-only system); install the packages on the sandbox host"
            )
        why = _repo_install(words)
        if why == "":
            kinds.append("repo")
            continue
        if why is not None:
            raise ProvisionRefused(
                f"{where} {cmd!r}: {why}, which the environment's build does not hold (it is "
                "shared by every instance of the repo and version): list the requirements under "
                "'packages' in a spec file"
            )
        if _pip_args(words) is not None:
            kinds.append("pip")
            continue
        if not ours:
            raise ProvisionRefused(
                f"{where} {cmd!r}: a step that is neither pip nor a repository install acts on "
                "the repository or the system, which a shared environment does not hold; write a "
                "spec file for this repo and version without it"
            )
        kinds.append("run")
    if kinds and all(k in ("noop", "repo") for k in kinds):
        if "repo" in kinds:
            notes.append(f"{where} {cmd!r}: the repository is imported from the workspace root")
        return None
    if "repo" in kinds or "noop" in kinds:
        raise ProvisionRefused(
            f"{where} {cmd!r}: mixes a repository install or apt step with other commands; "
            "give them as separate steps"
        )
    return cmd


def environment_for(
    setup: EnvSetup, network: bool = False, timeout_s: float = 900.0
) -> Provisioning:
    """The sandbox environment of ``setup`` (module docstring).

    Raises:
        ProvisionRefused: a step that cannot be provisioned here, named with the reason.
    """
    if setup.requirements_file:
        raise ProvisionRefused(
            f"{setup.repo} {setup.version}: packages {setup.requirements_file!r}: SWE-bench "
            "installs the repository's own file at its environment_setup_commit, which the "
            "environment's build does not hold: list the requirements under 'packages' in a "
            "spec file (--spec)"
        )
    ours = setup.source != "swebench"
    host: list[str] = []
    notes: list[str] = []
    runs: list[str] = []
    if setup.packages:
        runs.append("pip install " + " ".join(shlex.quote(p) for p in setup.packages))
    for name, cmds in (("pre_install", setup.pre_install), ("install", setup.install)):
        for cmd in cmds:
            run = _step(cmd, f"{setup.repo} {setup.version} {name}:", ours, host, notes)
            if run is not None:
                runs.append(run)
    if setup.python:
        notes.append(f"python {setup.python}: the tests run on the sandbox's own Python")
    if not runs and not host:
        return Provisioning(None, notes)
    spec = EnvSpec.model_validate(
        {
            "host_packages": sorted(set(host)),
            "steps": [{"run": r} for r in runs],
            "network": network,
            "timeout_s": timeout_s,
        }
    )
    return Provisioning(spec, notes)


PROVISION_FAILED = "provision_failed: "


def provision_failure(result: TaskResult) -> dict[str, Any] | None:
    """``{"provision_failed": reason, "provision_log": build log}`` when the sandbox could not
    provision the task's environment (an ``infra_error``: masked, never scored), else None."""
    if str(result.verdict) != "infra_error" or not result.detail.startswith(PROVISION_FAILED):
        return None
    return {
        "provision_failed": result.detail[len(PROVISION_FAILED) :],
        "provision_log": result.stderr[-4000:],
    }
