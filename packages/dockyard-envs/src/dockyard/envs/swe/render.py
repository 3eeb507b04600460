"""A :class:`~dockyard.envs.swe.plan.SwePlan` written for a builder: the layered builder's
``ImageSpec`` (:func:`image_spec`) or the sandbox's current ``EnvSpec`` over its own system
(:func:`envspec_fields`).

First :func:`resolve` replaces the steps that read the repository (``requirements``,
``environment_yml``, ``build_requires``, ``repo_deps``) by what they read, from a
:class:`~dockyard.envs.swe.repofiles.RepoFiles` at environment_setup_commit:

* ``requirements`` -> ``("req_text", text)``: the first existing file, ``-r`` includes inlined,
  ``-e .`` / ``.[test`` / comment lines dropped, SWE-bench's yanked-package replacements;
* ``environment_yml`` -> ``pip`` / ``apt`` steps: its conda dependencies through the tables
  (a conda-only package is refused, named), its ``pip:`` list as is;
* ``build_requires`` -> a ``pip`` step of pyproject.toml's ``[build-system] requires``;
* ``repo_deps`` -> ``("repo_deps", {archive, prepare, extras})``.

Then, per builder:

======================  =================================  ====================================
step                    ``image_spec`` (layered)            ``envspec_fields`` (system base)
======================  =================================  ====================================
``env``                 ``ENV``                             ``env``
``apt``                 ``RUN apt-get install -y``          ``host_packages`` (unpacked debs)
``pip``                 ``RUN python -m pip install``       ``run: pip install`` (the prefix)
``req_text``            ``COPY`` + ``RUN pip install -r``   ``files`` + ``run: pip install -r``
``repo_deps``           ``COPY`` the tree + ``RUN``         ``files`` (the tree) + ``run``
``locale``              ``RUN`` locale-gen of the names     ``LANG`` / ``LC_ALL`` = C.UTF-8
                                                            (same encoding; noted)
``repo_path``           ``ENV PYTHONPATH=/testbed/src:…``   ``PYTHONPATH=/workspace/src:…``
repository stage        the task's ``setup_command``        the task's ``setup_command``
======================  =================================  ====================================
"""

from __future__ import annotations

import base64
import io
import re
import shlex
import tarfile
import tomllib
from typing import Any

import yaml

from dockyard.envs.swe.commands import StepRefused, naming
from dockyard.envs.swe.plan import Step, SwePlan, conda_to_pip
from dockyard.envs.swe.repofiles import RepoFiles
from dockyard.envs.swe.tables import debian_name
from dockyard.sandbox.envspec import ENV_MOUNT

_EXCLUDED = ("-e .", "#", ".[test")
_REQ_DIR = "/opt/dockyard-swe"  # where the layered image keeps copied requirement files
_LOCALE_VARS = ("LANG", "LC_ALL", "LANGUAGE")
WORKSPACE = "/workspace"  # where the repository is in every jail of the system route


def _need(files: RepoFiles | None, step: Step) -> RepoFiles:
    if files is None:
        raise StepRefused(
            f"{step.op} reads the repository at environment_setup_commit, which "
            "this process cannot read: give the instance's repository as repo_git (a local "
            "clone) or repo_tarball"
        )
    return files


def requirements_text(files: RepoFiles, paths: list[str]) -> str:
    """SWE-bench's ``get_requirements_by_commit`` over ``files`` (module docstring)."""
    for path in paths:
        data = files.read(path)
        if data is not None:
            break
    else:
        raise StepRefused(f"none of {paths} in {files.where}")
    req_dir = path.rsplit("/", 1)[0] if "/" in path else ""
    included, own = [], []
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip().startswith("-r"):
            name = line.strip()[2:].strip()
            extra = files.read(f"{req_dir}/{name}" if req_dir else name) or b""
            included += [x for x in extra.decode("utf-8", "replace").splitlines() if not _skip(x)]
        elif not _skip(line):
            own.append(line)
    text = "\n".join([*included, *own]) + "\n"
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.test_spec.python import clean_requirements
    except ImportError:
        return text
    return clean_requirements(text)


def _skip(line: str) -> bool:
    return any(line.strip().startswith(x) for x in _EXCLUDED)


def _environment_yml(plan: SwePlan, text: bytes, source: str) -> list[Step]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise StepRefused(f"environment.yml is not YAML ({e})") from e
    deps = doc.get("dependencies", []) if isinstance(doc, dict) else []
    pip, apt, pip_list = [], [], []
    for d in deps:
        if isinstance(d, dict):
            pip_list += [str(x) for x in d.get("pip", [])]
            continue
        kind, req = conda_to_pip(str(d).split("::")[-1])
        if kind == "skip":
            plan.notes.append(f"{source}: {req}")
        else:
            (pip if kind == "pip" else apt).append(req)
    out = [Step("apt", [debian_name(p, plan.release) for p in apt], source)] if apt else []
    return out + [Step("pip", x, source) for x in (pip, pip_list) if x]


def _build_requires(files: RepoFiles) -> list[str]:
    data = files.read("pyproject.toml")
    if data is None:
        return []
    try:
        doc = tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return []
    reqs = doc.get("build-system", {}).get("requires", [])
    return [str(r) for r in reqs if isinstance(r, str)]


def resolve(plan: SwePlan, files: RepoFiles | None) -> list[Step]:
    """The environment steps with the repository's files read (module docstring).

    Raises:
        StepRefused: a step that reads the repository when ``files`` is None, a missing file,
        a conda-only dependency of environment.yml — naming the step."""
    out: list[Step] = []
    for s in plan.environment:
        with naming(f"{plan.repo} {plan.version} {s.source}"):
            out += _resolve_step(plan, s, files)
    return out


def _resolve_step(plan: SwePlan, s: Step, files: RepoFiles | None) -> list[Step]:
    if s.op == "requirements":
        return [Step("req_text", requirements_text(_need(files, s), s.value), s.source)]
    if s.op == "environment_yml":
        f = _need(files, s)
        data = next((d for d in (f.read(p) for p in s.value) if d is not None), None)
        if data is None:
            raise StepRefused(f"none of {s.value} in {f.where}")
        return _environment_yml(plan, data, s.source)
    if s.op == "build_requires" and files is None:
        plan.notes.append(f"{s.source}: [build-system] requires not read (no repository)")
        return []
    if s.op == "build_requires":
        reqs = _build_requires(files)
        return [Step("pip", reqs, s.source)] if reqs else []
    if s.op == "repo_deps":
        return [Step("repo_deps", {**s.value, "archive": _need(files, s).archive()}, s.source)]
    return [s]


def _pip(args: list[str]) -> str:
    return "python -m pip install " + " ".join(shlex.quote(a) for a in args)


def _repo_deps_run(value: dict[str, Any]) -> str:
    extras = ",".join(value["extras"])
    return " && ".join([*value["prepare"], _pip([f".[{extras}]"])])


def _tar(members: dict[str, bytes], gz: bool = True) -> bytes:
    """A tar of ``members``: gzipped for an ``EnvSpec`` files step, plain for the layered
    builder's COPY payload (``layers.spec.CopyStep``: an uncompressed tar)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def setup_command(plan: SwePlan) -> str | None:
    """The repository stage as one shell command (run in the repository before the patch)."""
    runs = [s.value for s in plan.repository]
    return " && ".join(f"( {r} )" for r in runs) if runs else None


def envspec_fields(plan: SwePlan, steps: list[Step]) -> dict[str, Any]:
    """``EnvSpec`` fields over the sandbox's own system (module docstring); ``notes`` says
    what was approximated. Only ``timeout_s`` / ``network`` are left to the caller."""
    env: dict[str, str] = {}
    host: list[str] = []
    runs: list[dict[str, str]] = []
    notes = [f"python {plan.python or '?'}: the system route runs the sandbox's own Python"]
    for s in steps:
        if s.op == "env":
            env.update(s.value)
        elif s.op == "apt":
            host += s.value
        elif s.op == "pip" and s.value:
            runs.append({"run": _pip(s.value).replace("python -m pip", "pip", 1)})
        elif s.op == "req_text":
            runs.append(
                {
                    "files": base64.b64encode(
                        _tar({"dockyard-requirements.txt": s.value.encode()})
                    ).decode()
                }
            )
            runs.append({"run": "pip install -r dockyard-requirements.txt"})
        elif s.op == "repo_deps":
            runs.append({"files": base64.b64encode(s.value["archive"]).decode()})
            runs.append({"run": _repo_deps_run(s.value).replace("python -m pip", "pip")})
        elif s.op == "run":
            runs.append({"run": s.value})
        elif s.op == "repo_path":
            dirs = [f"{WORKSPACE}/{d}" for d in s.value]
            env["PYTHONPATH"] = ":".join([*dirs, f"{ENV_MOUNT}/site"])
            env["DOCKYARD_ENV_SITE"] = env["PYTHONPATH"]  # the sandbox's test runner (python -I)
        elif s.op == "locale":
            notes.append(f"{s.source}: locales {s.value} -> C.UTF-8 (the system route)")
    for k in _LOCALE_VARS:
        if k in env and re.fullmatch(
            r"[a-z]{2}_[A-Z]{2}\.UTF-8|[a-z]{2}_[A-Z]{2}:[a-z]{2}", env[k]
        ):
            env[k] = "C.UTF-8" if k != "LANGUAGE" else "C"
    return {"env": env, "host_packages": sorted(set(host)), "steps": runs, "notes": notes}


def image_spec(plan: SwePlan, steps: list[Step]) -> dict[str, Any]:
    """The layered builder's ``ImageSpec`` (dict) of the environment stage: one
    ``python:<release>`` stage, WORKDIR /testbed (SWE-bench's), the steps in order."""
    out: list[dict[str, Any]] = [{"workdir": "/testbed"}]
    for s in steps:
        if s.op == "env":
            out.append({"env": dict(s.value)})
        elif s.op == "apt":
            pkgs = " ".join(shlex.quote(p) for p in s.value)
            out.append(
                {"run": f"apt-get update && apt-get install -y --no-install-recommends {pkgs}"}
            )
        elif s.op == "pip" and s.value:
            out.append({"run": _pip(s.value)})
        elif s.op == "req_text":
            out.append({"copy": _copy({"requirements.txt": s.value.encode()}, f"{_REQ_DIR}/")})
            out.append({"run": f"python -m pip install -r {_REQ_DIR}/requirements.txt"})
        elif s.op == "repo_deps":
            out.append({"copy": _copy_tree(s.value["archive"], "/testbed/")})
            out.append({"run": _repo_deps_run(s.value)})
        elif s.op == "run":
            out.append({"run": s.value})
        elif s.op == "repo_path":  # PYTHONPATH, and for the sandbox's runner (python -I) its own
            path = ":".join(f"/testbed/{d}" for d in s.value)
            out.append({"env": {"PYTHONPATH": path, "DOCKYARD_ENV_SITE": path}})
        elif s.op == "locale":
            gen = " && ".join(f"locale-gen {shlex.quote(n)}" for n in s.value)
            out.append({"run": f"apt-get update && apt-get install -y locales && {gen}"})
    return {"stages": [{"name": None, "base": plan.base, "steps": out}], "notes": list(plan.notes)}


def _copy(files: dict[str, bytes], dest: str) -> dict[str, Any]:
    members = {f"s{i}": data for i, data in enumerate(files.values())}
    data = _tar(members, gz=False)
    return {"files": base64.b64encode(data).decode(), "names": list(files), "dest": dest}


def _copy_tree(archive: bytes, dest: str) -> dict[str, Any]:
    """A COPY of a whole tree (a ``.tar.gz``) into ``dest``: the builder's source ``s0`` is a
    directory, whose contents Docker copies into the destination (a plain tar: the builder's
    payload)."""
    buf = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as src,
        tarfile.open(fileobj=buf, mode="w") as out,
    ):
        for m in src.getmembers():
            name = m.name.lstrip("./")
            m.name = f"s0/{name}" if name else "s0"
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
    return {
        "files": base64.b64encode(buf.getvalue()).decode(),
        "names": ["repository"],
        "dest": dest,
    }
