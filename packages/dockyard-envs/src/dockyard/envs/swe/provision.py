"""Per-(repo, version) environments: an :class:`~dockyard.envs.swe.specs.EnvSetup` as a sandbox
:class:`~dockyard.sandbox.envspec.EnvSpec`, provisioned once and shared read-only, plus the
repository stage each task runs before its patch.

The setup is first translated into a build plan (:mod:`dockyard.envs.swe.plan`: a
``python:<release>`` base, environment steps, repository steps; conda steps through pip / Debian
tables, compiled editable installs built in place with the host's compilers; what has no route
refused, naming the step). The plan is then written for one of two builders (``builder``):

* ``"prefix"`` (the default): the sandbox's ``EnvSpec`` over its own system
  (:func:`~dockyard.envs.swe.render.envspec_fields`): pip installs go to the prefix
  (``/opt/env/site``, on the path of every test run), Debian packages are unpacked into it, the
  tests run on the sandbox's Python (noted);
* ``"layers"``: the layered builder's ``ImageSpec`` (:func:`layered_image`: a
  ``python:<release>`` Debian root and RUN / ENV / COPY steps, WORKDIR /testbed), built as Docker
  builds SWE-bench's images; the tests run on the *image's* Python, its pytest and packages
  (the sandbox's pytest runner on ``TestsSpec.python``, or the spec's own test command whose log
  SWE-bench's parser reads). A pytest-driven spec that installs no pytest gets one (noted).

The spec depends only on the setup and the repository's files at environment_setup_commit, so
every instance of one (repo, version) names the same environment: one build, one cache entry.
The repository stage (the spec's edits of the repository's files, ``build_ext --inplace``) is
the task's ``setup_command``: it runs in the task's (or session's) copy of the repository.

Network: only when the operator allows it (``network=True``, and the sandbox service runs with
``--allow-network``); otherwise ``pip`` must find everything locally, or the build fails and is
reported with its log.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.plan import SwePlan, plan_for
from dockyard.envs.swe.render import envspec_fields, image_spec, resolve, setup_command
from dockyard.envs.swe.repofiles import RepoFiles
from dockyard.envs.swe.specs import EnvSetup
from dockyard.sandbox.envspec import EnvSpec
from dockyard.sandbox.models import TaskResult

ProvisionRefused = StepRefused
"""A setup step that cannot be provisioned here; the message names the step and why."""


BUILDERS = ("prefix", "layers")
IMAGE_PYTHON = "python"  # every python:<release> root has it (layers/bases.py), as Docker's have


@dataclass
class Provisioning:
    """The environment of one setup: ``spec`` (None: nothing to provision), the repository
    stage (``setup_command``, None: none), ``notes`` (for reports) and the ``plan``."""

    spec: EnvSpec | None
    notes: list[str] = field(default_factory=list)
    setup_command: str | None = None
    plan: SwePlan | None = None

    @property
    def python(self) -> str | None:
        """The interpreter the tests run on: the image's, or None (the sandbox's own)."""
        return IMAGE_PYTHON if self.spec is not None and self.spec.image is not None else None


def reqs_paths(repo: str) -> dict[str, list[str]]:
    """Where SWE-bench looks for ``repo``'s requirements file / environment.yml."""
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.constants import MAP_REPO_TO_ENV_YML_PATHS, MAP_REPO_TO_REQS_PATHS
    except ImportError:
        return {}
    out = {}
    if repo in MAP_REPO_TO_REQS_PATHS:
        out["requirements"] = list(MAP_REPO_TO_REQS_PATHS[repo])
    if repo in MAP_REPO_TO_ENV_YML_PATHS:
        out["environment"] = list(MAP_REPO_TO_ENV_YML_PATHS[repo])
    return out


def setup_plan(setup: EnvSetup) -> SwePlan:
    """The build plan of ``setup`` (raises :class:`ProvisionRefused` naming the step)."""
    return plan_for(setup, reqs_paths(setup.repo))


def environment_for(
    setup: EnvSetup, network: bool = False, timeout_s: float = 900.0,
    files: RepoFiles | None = None, builder: str = "prefix",
) -> Provisioning:  # fmt: skip
    """The sandbox environment of ``setup`` (module docstring). ``files``: the repository at
    environment_setup_commit, for the steps that read it (requirements files). ``builder``:
    ``"prefix"`` or ``"layers"`` (module docstring; a layered build reaches the package
    registries through the sandbox's egress proxy whatever ``network`` says).

    Raises:
        ProvisionRefused: a step that cannot be provisioned here, named with the reason.
        ValueError: an unknown ``builder``.
    """
    if builder not in BUILDERS:
        raise ValueError(f"swe builder {builder!r}: choose from {', '.join(BUILDERS)}")
    plan = setup_plan(setup)
    if builder == "layers":
        image = layered_image(setup, files, plan)
        spec = EnvSpec.model_validate(
            {"image": image, "workdir": "/testbed", "timeout_s": timeout_s}
        )
        return Provisioning(spec, list(image["notes"]), setup_command(plan), plan)
    fields = envspec_fields(plan, resolve(plan, files))
    notes = plan.notes + fields.pop("notes")
    cmd = setup_command(plan)
    if not fields["steps"] and not fields["host_packages"] and not fields["env"]:
        return Provisioning(None, notes, cmd, plan)
    spec = EnvSpec.model_validate({**fields, "network": network, "timeout_s": timeout_s})
    return Provisioning(spec, notes, cmd, plan)


def layered_image(
    setup: EnvSetup, files: RepoFiles | None = None, plan: SwePlan | None = None
) -> dict[str, Any]:
    """The layered builder's ``ImageSpec`` (dict) of ``setup``'s environment stage; its
    repository stage is :func:`~dockyard.envs.swe.render.setup_command` of the plan. Where the
    sandbox's pytest runner drives the tests (``setup.uses_our_runner``) and no step installs
    pytest, a last step installs it (noted): the runner runs on the image's Python."""
    plan = plan or setup_plan(setup)
    image = image_spec(plan, resolve(plan, files))
    base = base_packages()  # SWE-bench's base image: compilers for build_ext, git, locales
    image["stages"][0]["steps"].insert(1, {"run": apt_install(base + CONDA_PYTHON)})
    image["notes"].append(
        f"SWE-bench's base image packages: {' '.join(base)}; and {' '.join(CONDA_PYTHON)} "
        "(a conda env's python brings its headers, setuptools and wheel; Debian's python3-pip "
        "brings setuptools only up to bookworm)"
    )
    if setup.uses_our_runner and not _installs_pytest(image):
        image["stages"][-1]["steps"].append({"run": "python -m pip install pytest"})
        image["notes"].append(
            "pytest: no step of the spec installs it and the sandbox's runner drives the tests "
            "on the image's Python: `pip install pytest` added"
        )
    return image


BASE_PACKAGES = (
    "wget", "git", "build-essential", "libffi-dev", "libtiff-dev", "python3", "python3-pip",
    "python-is-python3", "jq", "curl", "locales", "locales-all", "tzdata",
)  # fmt: skip
"""SWE-bench's base image's packages (swebench 4.1's ``_DOCKERFILE_BASE_PY``), where the
swebench package is not installed."""


CONDA_PYTHON = ("python3-dev", "python3-setuptools", "python3-wheel")
"""What SWE-bench's ``conda create python=X.Y`` env has beside the interpreter and pip: its
headers (a C extension's build needs Python.h), setuptools, wheel."""


def base_packages() -> tuple[str, ...]:
    """The Debian packages of SWE-bench's base image (``_DOCKERFILE_BASE_PY``'s ``apt install``
    list, read from the installed swebench package; :data:`BASE_PACKAGES` without it)."""
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.dockerfiles.python import _DOCKERFILE_BASE_PY
    except ImportError:
        return BASE_PACKAGES
    m = re.search(r"apt install -y((?:\s*\\?\s*[A-Za-z0-9.+-]+)+)", _DOCKERFILE_BASE_PY)
    names = tuple(n for n in re.split(r"[\s\\]+", m.group(1)) if n) if m else ()
    return names or BASE_PACKAGES


def apt_install(packages: tuple[str, ...]) -> str:
    names = " ".join(shlex.quote(p) for p in packages)
    return (
        f"apt-get update && apt-get install -y --no-install-recommends {names} "
        "&& rm -rf /var/lib/apt/lists/*"
    )


def _installs_pytest(image: dict[str, Any]) -> bool:
    runs = [s.get("run", "") for st in image["stages"] for s in st["steps"]]
    return any("pip" in r and re.search(r"(?<![\w.-])pytest(?![\w-])", r) for r in runs)


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
