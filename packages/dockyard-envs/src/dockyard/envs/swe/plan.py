"""A (repo, version) environment spec as a build plan: a base and ordered Dockerfile-like steps.

:func:`plan_for` reads an :class:`~dockyard.envs.swe.specs.EnvSetup` (SWE-bench's
``MAP_REPO_VERSION_TO_SPECS`` entry or our spec format) the way SWE-bench's harness builds its
images, and writes it as a :class:`SwePlan` in two stages:

* **environment** (one per (repo, version), shared by its instances; SWE-bench's env image):
  ``base`` is ``python:<release>``, the Debian release shipping the spec's ``python`` (or the
  nearest one, noted: :func:`~dockyard.envs.swe.tables.nearest_release`), then steps, each a
  dict with one key:

  =====================================  ======================================================
  ``{"env": {K: V}}``                    ``eval_commands``' ``export K=V`` (Docker's ENV)
  ``{"apt": [pkg, ...]}``                ``apt-get install`` of ``pre_install``, conda packages
                                         that are system libraries; Ubuntu names mapped to
                                         Debian's (:mod:`~dockyard.envs.swe.tables`)
  ``{"pip": [arg, ...]}``                ``packages`` (conda names -> PyPI names, ``=1.2`` ->
                                         ``==1.2.*``), ``pip_packages``, ``pip install`` steps
  ``{"requirements": [path, ...]}``      ``packages: requirements.txt``: the first of these
                                         files of the repository at environment_setup_commit,
                                         cleaned as SWE-bench does (``-r`` inlined, ``-e .``
                                         dropped), then ``pip install -r``
  ``{"environment_yml": [path, ...]}``   ``packages: environment.yml``: its conda dependencies
                                         through the tables, its ``pip:`` list as is
  ``{"repo_deps": {extras, prepare}}``   ``pip install -e .[extras]``: the repository at
                                         environment_setup_commit, ``prepare`` (the spec's edits
                                         of its files) run in it, ``pip install '.[extras]'``
  ``{"build_requires": true}``           a compiled install: the repository's
                                         ``[build-system] requires`` (pyproject.toml)
  ``{"locale": [name, ...]}``            ``locale-gen`` and its ``/etc/locale.gen`` edits
  ``{"repo_path": ["src", "lib"]}``      an editable install: the repository's ``src/`` /
                                         ``lib/`` on the path (as its ``.pth`` would be)
  =====================================  ======================================================

* **repository** (per instance, run in the repository at its base commit before the patch;
  SWE-bench's instance image): ``{"run": text}`` steps — the spec's edits of the repository's
  files (``sed -i … setup.py``), and compiled editable installs (``pip install
  --no-build-isolation -e .``, ``python setup.py develop|install``, repositories of
  :data:`~dockyard.envs.swe.tables.COMPILED_REPOS`) as ``python setup.py build_ext --inplace``
  with the host's compilers (the extensions land beside the sources, as an editable install
  leaves them); C repositories' ``build`` steps (make, cmake, configure) likewise.

Every step remembers its ``source`` (``pre_install[2]``, ``install``, ``packages``, …). What
has no route is refused by :func:`plan_for` with :class:`StepRefused` naming the step and
the reason: conda packages published on conda only, downloads from hosts outside the package
registries, other languages' package registries the sandbox's egress does not reach.

**Rendering.** :mod:`dockyard.envs.swe.render` writes a plan as the layered builder's
``ImageSpec`` (``image_spec``: a ``python:<release>`` stage whose steps are ``RUN`` / ``ENV`` /
``COPY``) and, until that builder lands, as the sandbox's current ``EnvSpec`` over its own
system (``envspec_fields``; the repository stage becomes the task's ``setup_command``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.swe.commands import (
    Command,
    StepRefused,
    classify,
    download_key,
    naming,
    simple_commands,
)
from dockyard.envs.swe.specs import EnvSetup
from dockyard.envs.swe.tables import (
    CONDA_ONLY,
    CONDA_SKIPPED,
    CONDA_TO_DEBIAN,
    CONDA_TO_PIP,
    DOWNLOADS_TO_DEBIAN,
    REGISTRY_ECOSYSTEMS,
    debian_name,
    nearest_release,
)  # fmt: skip

BUILD_EXT = "[ ! -f setup.py ] || python setup.py build_ext --inplace"
LAYOUT_DIRS = ("src", "lib")
"""Where src-layout / lib-layout repositories keep their packages: an editable install puts
them on the path; so does the environment (``{"repo_path": [...]}``), beside the root."""
"""The repository stage of a compiled editable install (the host's compilers)."""

_REQS_PATHS_FALLBACK = ["requirements.txt"]
_ENV_YML_FALLBACK = ["environment.yml"]


@dataclass(frozen=True)
class Step:
    """One build step: ``op`` (``env``, ``apt``, ``pip``, ``requirements``, ``environment_yml``,
    ``repo_deps``, ``build_requires``, ``locale``, ``run``), its ``value`` and the spec entry it
    came from (``source``)."""

    op: str
    value: Any
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {self.op: self.value, "source": self.source}


@dataclass
class SwePlan:
    """A (repo, version) environment as ordered steps (module docstring)."""

    repo: str
    version: str
    base: str  # "python:<release>"
    python: str | None  # what the spec asked for
    environment: list[Step] = field(default_factory=list)
    repository: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def release(self) -> str:
        return self.base.split(":", 1)[1]

    @property
    def reads_repository(self) -> bool:
        """Some environment step reads the repository at environment_setup_commit."""
        ops = {"requirements", "environment_yml", "repo_deps", "build_requires"}
        return any(s.op in ops for s in self.environment)

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo, "version": self.version, "base": self.base, "python": self.python,
            "environment": [s.as_dict() for s in self.environment],
            "repository": [s.as_dict() for s in self.repository], "notes": self.notes,
        }  # fmt: skip


def conda_to_pip(spec: str) -> tuple[str, str]:
    """``(kind, requirement)`` of a conda package spec: kind ``pip`` (a PyPI requirement),
    ``apt`` (a Debian package), ``skip`` (the base has it; requirement is the note).
    ``numpy=1.19`` (conda's prefix match) -> ``numpy==1.19.*``. Raises StepRefused."""
    name = spec
    for i, ch in enumerate(spec):
        if ch in "=<>!~ ":
            name = spec[:i]
            break
    ver = spec[len(name) :].strip()
    key = name.lower()
    if key in CONDA_ONLY:
        raise StepRefused(f"conda package {spec!r}: {CONDA_ONLY[key]}")
    if key in CONDA_SKIPPED:
        return "skip", f"conda package {spec!r}: {CONDA_SKIPPED[key]}"
    if key in CONDA_TO_DEBIAN:
        return "apt", CONDA_TO_DEBIAN[key]
    if ver.startswith("=") and not ver.startswith("=="):
        ver = "==" + ver[1:] + ("" if ver.endswith("*") else ".*")
    return "pip", CONDA_TO_PIP.get(key, name) + ver


class _Planner:
    def __init__(self, setup: EnvSetup) -> None:
        self.setup = setup
        release, note = nearest_release(setup.python)
        self.plan = SwePlan(setup.repo, setup.version, f"python:{release}", setup.python)
        if note:
            self.plan.notes.append(note)
        self.prepare: list[str] = []  # repository edits of pre_install, in order

    def env(self, op: str, value: Any, source: str) -> None:
        self.plan.environment.append(Step(op, value, source))

    def repo_run(self, text: str, source: str) -> None:
        self.plan.repository.append(Step("run", text, source))

    def conda(self, specs: list[str], source: str) -> None:
        pip, apt = [], []
        for spec in specs:
            kind, req = conda_to_pip(spec)
            if kind == "skip":
                self.plan.notes.append(f"{source}: {req}")
            else:
                (pip if kind == "pip" else apt).append(req)
        if apt:
            self.env("apt", [debian_name(p, self.plan.release) for p in apt], source)
        if pip:
            self.env("pip", pip, source)

    def line(self, text: str, source: str) -> None:
        """One spec line (a pre_install / install / build entry) into steps. In our own spec
        files a line no route reads is an environment ``run`` step (an empty build tree, the
        prefix writable), as the spec's author meant it."""
        ours = self.setup.source != "swebench"
        try:
            cmds = [classify(words, self.setup.repo) for words in simple_commands(text)]
        except StepRefused:
            if not ours:
                raise
            cmds = [Command([], "other", ["sh"])]
        kinds = {c.kind for c in cmds} - {"noop", "assign"}
        if any("upgrade" in c.args for c in cmds if c.kind == "noop"):
            self.plan.notes.append(f"{source}: 'apt-get upgrade' skipped (the base is current)")
        local = {"repo_edit", "system_edit", "other"}
        if kinds & local and kinds & {"repo_install", "compiled"}:
            raise StepRefused(
                "mixes a repository install with other commands; give them as separate steps"
            )
        if ours and kinds & local:
            self.env("run", text, source)
            return
        if kinds and kinds <= {"repo_edit"}:
            self.prepare.append(text)
            self.repo_run(text, source)
            return
        if kinds & {"repo_edit", "other"} and kinds - {"repo_edit", "other"}:
            raise StepRefused("mixes repository edits with installs; give them as separate steps")
        for c in cmds:
            self.command(c, text, source)

    def command(self, c: Command, text: str, source: str) -> None:
        if c.kind == "apt":
            self.env("apt", [debian_name(p, self.plan.release) for p in c.args], source)
        elif c.kind == "pip":
            self.env("pip", c.args, source)
        elif c.kind == "conda":
            self.conda(c.args, source)
        elif c.kind == "requirements":
            self.env("requirements", c.args, source)
        elif c.kind in ("repo_install", "compiled"):
            self.repo_install(c, source)
        elif c.kind == "export":
            self.env("env", c.env, source)
        elif c.kind == "locale":
            self.env("locale", [a for a in c.args if not a.startswith("-")], source)
        elif c.kind == "system_edit":
            if any(p == "/etc/locale.gen" for p in c.args):
                return  # part of the locale step
            raise StepRefused(f"writes {c.args[0]}, outside the repository and the environment")
        elif c.kind == "other":
            self.other(c, text, source)

    def repo_install(self, c: Command, source: str) -> None:
        if not any(s.op == "repo_path" for s in self.plan.environment):
            self.env("repo_path", list(LAYOUT_DIRS), source)
        if c.args:
            self.env("repo_deps", {"extras": c.args, "prepare": list(self.prepare)}, source)
        if c.kind == "compiled" and not any(r.value == BUILD_EXT for r in self.plan.repository):
            self.env("build_requires", True, source)
            self.repo_run(BUILD_EXT, source)
            self.plan.notes.append(f"{source}: compiled in place (build_ext --inplace)")
        else:
            self.plan.notes.append(f"{source}: the repository is imported from the workspace")

    def other(self, c: Command, text: str, source: str) -> None:
        lang = c.args[0]
        if lang != "c":
            raise StepRefused(_language_reason(lang, self.setup))
        if self.plan.repository and self.plan.repository[-1].source == source:
            return  # the whole line is already a repository step
        self.repo_run(text, source)


def _language_reason(lang: str, setup: EnvSetup) -> str:
    registry = REGISTRY_ECOSYSTEMS.get(lang, "")
    if registry:
        return f"needs {registry}, which the sandbox's egress does not reach"
    node = (setup.other.get("docker_specs") or {}).get("node_version", "?")
    return (
        f"a {lang} build (node {node}, npm): the npm registry is reachable, but this "
        "translation covers Python and C specs only"
    )


def plan_for(setup: EnvSetup, reqs_paths: dict[str, list[str]] | None = None) -> SwePlan:
    """The build plan of ``setup`` (module docstring). ``reqs_paths``: where a repository
    keeps its requirements file / environment.yml (SWE-bench's ``MAP_REPO_TO_REQS_PATHS`` /
    ``MAP_REPO_TO_ENV_YML_PATHS``; defaults ``requirements.txt`` / ``environment.yml``).

    Raises:
        StepRefused: naming the repo, version, step and the reason.
    """
    p = _Planner(setup)
    where = f"{setup.repo} {setup.version}"
    lang = setup.language
    if lang not in ("py", "c"):
        raise StepRefused(f"{where}: {_language_reason(lang, setup)}")
    try:
        _fill(p, setup, reqs_paths or {})
    except StepRefused as e:
        raise StepRefused(f"{where} {e}") from e
    return p.plan


def _fill(p: _Planner, setup: EnvSetup, reqs_paths: dict[str, list[str]]) -> None:
    for line in setup.eval_commands:
        p.line(line, "eval_commands")
    if setup.other.get("apt-pkgs"):
        p.env("apt", [debian_name(x, p.plan.release) for x in setup.other["apt-pkgs"]], "apt-pkgs")
    pre = list(enumerate(setup.pre_install))
    downloads = {download_key(line) for _, line in pre} - {None}
    for key in sorted(k for k in downloads if k):
        pkgs, cmd, note = DOWNLOADS_TO_DEBIAN[key]
        p.env("apt", [debian_name(x, p.plan.release) for x in pkgs], "pre_install")
        p.repo_run(cmd, "pre_install")
        p.plan.notes.append(f"pre_install: {note}")
    if setup.conda_packages:
        with naming(f"packages {' '.join(setup.conda_packages)!r}"):
            p.conda(setup.conda_packages, "packages")
    if setup.requirements_file == "requirements.txt":
        p.env("requirements", reqs_paths.get("requirements", _REQS_PATHS_FALLBACK), "packages")
    elif setup.requirements_file == "environment.yml":
        p.env("environment_yml", reqs_paths.get("environment", _ENV_YML_FALLBACK), "packages")
    if setup.packages:
        p.env("pip", list(setup.packages), "pip_packages")
    lines = [(f"pre_install[{i}]", x) for i, x in pre if download_key(x) is None]
    lines += [(f"install[{i}]", x) for i, x in enumerate(setup.install)]
    build = setup.other.get("build")
    lines += [
        (f"build[{i}]", x) for i, x in enumerate([build] if isinstance(build, str) else build or [])
    ]
    for source, line in lines:
        with naming(f"{source} {line[:200]!r}"):
            p.line(line, source)
