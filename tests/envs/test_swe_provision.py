"""Per-(repo, version) environments of SWE instances, against the real sandbox service.

A spec-file repository (``acme/needsdep``) whose code imports ``fastmath``, a package only its
environment has: the install step pip-installs a wheel (made by a shell step, offline) into the
environment's prefix. The gold patch resolves with the environment and not without it; two
instances of the same (repo, version) share one cached build; a failing install is a masked
provision failure carrying its build log (validate, the agent, the one-shot environment); a
conda step is refused naming it. The translation of SWE-bench's own specs is checked on the
swebench package's map.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from dockyard.envs.rewards import TESTS
from dockyard.envs.swe.agent import SweAgentEnvironment
from dockyard.envs.swe.env import SweEnvironment, task_environment
from dockyard.envs.swe.instance import unified_diff
from dockyard.envs.swe.provision import ProvisionRefused, environment_for
from dockyard.envs.swe.sdist import tarball
from dockyard.envs.swe.specs import EnvSetup, swebench_setup
from dockyard.envs.swe.validate import validate
from dockyard.sandbox.client import AsyncSandboxClient

REPO = "acme/needsdep"
BASE_TEST = "import calc\n\n\ndef test_mul():\n    assert calc.fastmath.mul(2, 3) == 6\n"
GOOD = "import fastmath\n\n\ndef double(x):\n    return fastmath.mul(x, 2)\n\n\ndef square(x):\n    return fastmath.mul(x, x)\n"  # fmt: skip
NEW_TESTS = {
    "double": "\n\ndef test_double():\n    assert calc.double(5) == 10\n",
    "square": "\n\ndef test_square():\n    assert calc.square(4) == 16\n",
}
BUGS = {"double": ("mul(x, 2)", "mul(x, 3)"), "square": ("mul(x, x)", "mul(x, x + 1)")}


def _wheel_b64() -> str:
    """A pure-Python wheel of ``fastmath`` (base64), which the install step pip-installs."""
    files = {
        "fastmath/__init__.py": "def mul(a, b):\n    return a * b\n",
        "fastmath-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: fastmath\nVersion: 0.1\n",
        "fastmath-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }  # fmt: skip
    files["fastmath-0.1.dist-info/RECORD"] = (
        "".join(f"{n},,\n" for n in files) + "fastmath-0.1.dist-info/RECORD,,\n"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n, t in files.items():
            zf.writestr(n, t)
    return base64.b64encode(buf.getvalue()).decode()


WHL = "fastmath-0.1-py3-none-any.whl"
INSTALL = [
    f"echo {_wheel_b64()} | base64 -d > {WHL} && pip install --no-index --no-deps ./{WHL}",
    "pip install -e .",
]


def _record(which: str, repo: str = REPO) -> dict:
    """A SWE-bench-layout instance of ``repo`` 1.0 whose base has the ``which`` bug."""
    good, bad = BUGS[which]
    buggy = GOOD.replace(good, bad)
    return {
        "instance_id": f"acme__needsdep-{which}",
        "repo": repo,
        "base_commit": "0" * 40,
        "patch": unified_diff("calc.py", buggy, GOOD),
        "test_patch": unified_diff("tests/test_calc.py", BASE_TEST, BASE_TEST + NEW_TESTS[which]),
        "FAIL_TO_PASS": [f"tests/test_calc.py::test_{which}"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_mul"],
        "version": "1.0",
        "environment_setup_commit": "0" * 40,
        "problem_statement": f"{which}() returns the wrong value",
        "hints_text": "",
        "created_at": "",
        "repo_tarball": base64.b64encode(
            tarball({"calc.py": buggy.encode(), "tests/test_calc.py": BASE_TEST.encode()})
        ).decode(),
    }


def _spec(tmp_path: Path, name: str, install: list[str], repo: str = REPO) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({repo: {"1.0": {"install": install, "test_cmd": "pytest"}}}))
    return str(path)


def _validate(url: str, tasks: list[dict], spec: str) -> list[dict]:
    async def go() -> list[dict]:
        client = AsyncSandboxClient(url)
        try:
            return await validate(client, tasks, [spec], concurrency=4, timeout_s=60)
        finally:
            await client.aclose()

    return asyncio.run(go())


def _entries(service, key: str) -> list[os.stat_result]:
    cache = Path(service.env_cache_dir)
    return [os.stat(p) for p in cache.iterdir() if p.name.startswith(key) or key in p.name]


# -- the translation (no sandbox) ------------------------------------------------------------------
def test_translation_maps_pip_and_refuses_what_cannot_run_naming_the_step():
    s = EnvSetup(REPO, "1.0", "pytest", packages=["six==1.16.0"], install=INSTALL)
    prov = environment_for(s)
    assert prov.spec is not None
    runs = [st.run for st in prov.spec.steps]
    assert runs == ["pip install six==1.16.0", INSTALL[0]]  # `pip install -e .`: no build step
    assert any("imported from the workspace" in n for n in prov.notes), prov.notes
    assert prov.setup_command is None
    assert prov.spec.network is False
    networked = environment_for(s, network=True).spec
    assert networked is not None
    assert networked.network  # only when the operator allows it
    apt = environment_for(EnvSetup(REPO, "1.0", "pytest", pre_install=["apt-get update && apt-get install -y locales"]))  # fmt: skip
    assert apt.spec is not None
    assert apt.spec.host_packages == ["locales"]
    assert not apt.spec.steps
    refusals = {
        "conda install -y cdms2": "published on conda only",
        "pip install -e . && echo done": "separate steps",
        "wget https://example.org/x.tgz": "downloads from example.org",
        "npm install": "npm registry",
        "cargo build": "crates.io",
    }
    for cmd, why in refusals.items():
        with pytest.raises(ProvisionRefused, match=r"install\[0\]") as e:
            environment_for(EnvSetup(REPO, "1.0", "pytest", install=[cmd], source="swebench"))
        assert cmd in str(e.value), str(e.value)
        assert why in str(e.value), str(e.value)
    # SWE-bench's own specs (the swebench package)
    pyt = swebench_setup("pytest-dev/pytest", "5.4")  # pip_packages + `python -m pip install -e .`
    assert pyt is not None
    prov = environment_for(pyt)
    assert prov.spec is not None
    assert [st.run for st in prov.spec.steps] == [
        "pip install py==1.11.0 packaging==23.1 attrs==23.1.0 more-itertools==10.1.0 pluggy==0.13.1"
    ]
    # the repository's own requirements file: read at environment_setup_commit, so without the
    # repository at hand the step that needs it is named
    reqs = swebench_setup("django/django", "3.0")
    assert reqs is not None
    assert reqs.requirements_file == "requirements.txt"
    with pytest.raises(
        ProvisionRefused, match=r"django/django 3.0 packages: requirements reads the repository"
    ):
        environment_for(reqs)


# -- against the sandbox -----------------------------------------------------------------------------
def test_gold_resolves_only_with_the_environment_built_once(sandbox_service, tmp_path, arun):
    url = sandbox_service.url
    good = _spec(tmp_path, "good", INSTALL)
    tasks = [_record("double"), _record("square")]
    rows = _validate(url, tasks, good)
    assert [r["valid"] for r in rows] == [True, True], rows
    assert all(any("imported from the workspace" in n for n in r["provision_notes"]) for r in rows)
    # one cached build for the (repo, version), named by the spec's hash, nothing half-built
    spec = task_environment(tasks[0], [good])
    assert spec is not None
    assert task_environment(tasks[1], [good]) == spec
    built = _entries(sandbox_service, spec.key())
    assert len(built) == 1
    assert not list(Path(sandbox_service.env_cache_dir).glob(".build-*"))
    # the one-shot environment scores with the same build (no rebuild: same entry, same inode)
    env = SweEnvironment(url, spec_files=[good])
    step = arun(env, env.score(tasks[1], f"```diff\n{tasks[1]['patch']}```"))
    assert not step.infra_error, step.metadata
    assert step.rewards[TESTS] == 1.0, step.metadata
    after = _entries(sandbox_service, spec.key())
    assert [(s.st_ino, s.st_mtime_ns) for s in after] == [(s.st_ino, s.st_mtime_ns) for s in built]
    # without the environment (same repo, no install steps) the gold patch cannot import calc
    bare = _validate(url, tasks[:1], _spec(tmp_path, "bare", []))
    assert not bare[0]["valid"], bare
    assert bare[0]["reason"].startswith("gold: failed"), bare


def test_agent_session_and_finish_use_the_environment(sandbox_url, tmp_path, arun):
    good = _spec(tmp_path, "good", INSTALL)
    task = _record("double")
    env = SweAgentEnvironment(sandbox_url, spec_files=[good], tools=["bash", "submit"])

    def call(tool, **args):
        return f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"

    async def go():
        state = await env.reset(task)
        try:
            probe = await env.step(state, call("bash", command="python3 -c 'import fastmath; print(fastmath.mul(6, 7))'"))  # fmt: skip
            fix = await env.step(state, call("bash", command="sed -i 's/mul(x, 3)/mul(x, 2)/' calc.py"))  # fmt: skip
            end = await env.step(state, call("submit"))
        finally:
            await env.close(state)
        return probe, fix, end

    probe, _fix, end = arun(env, go())
    assert "42" in probe.observation, probe.observation
    assert end.done, end.metadata
    assert not end.infra_error, end.metadata
    assert end.rewards[TESTS] == 1.0, end.metadata


def test_failing_or_refused_install_is_a_masked_provision_failure_with_its_log(
    sandbox_url, tmp_path, arun
):
    bad = _spec(tmp_path, "bad", ["echo building fastmath >&2; exit 7"], repo="acme/broken")
    task = _record("double", repo="acme/broken")
    (row,) = _validate(sandbox_url, [task], bad)
    assert row["status"] == "provision_failed", row
    assert not row["valid"], row
    assert "exited 7" in row["provision_failed"]
    assert "building fastmath" in row["provision_log"]
    assert row["gold"]["verdict"] == row["empty"]["verdict"] == "infra_error"  # not scored
    # the agent: reset cannot build the session's environment -> masked, with the log
    agent = SweAgentEnvironment(sandbox_url, spec_files=[bad], tools=["bash", "submit"])

    async def episode():
        state = await agent.reset(task)
        return await agent.step(state, "anything")

    step = arun(agent, episode())
    assert step.infra_error
    assert step.done
    assert not step.rewards
    assert "exited 7" in step.metadata["provision_failed"]
    assert "building fastmath" in step.metadata["provision_log"]
    # the one-shot environment: the task's build fails -> masked, with the log
    env = SweEnvironment(sandbox_url, spec_files=[bad])
    step = arun(env, env.score(task, f"```diff\n{task['patch']}```"))
    assert step.infra_error
    assert "building fastmath" in step.metadata["provision_log"]
    # a conda package with no pip or Debian equivalent is refused before anything runs, named
    conda = _spec(tmp_path, "conda", ["conda install -y cdms2"], repo="acme/conda")
    (row,) = _validate(sandbox_url, [_record("double", repo="acme/conda")], conda)
    assert row["status"] == "provision_failed", row
    assert "conda install -y cdms2" in row["provision_failed"], row
    assert "published on conda only" in row["provision_failed"], row
    assert row["failure"]["step"] == "translation", row


def test_pro_fixture_validates_in_its_provisioned_environment(sandbox_url):
    """examples/data/swe_pro (SWE-bench Pro layout, grpo_swe_pro.yaml's data): every gold patch
    resolves and no empty one does, in the environment its spec file provisions."""
    from dockyard.envs.swe.data import load_swebench_jsonl

    root = Path(__file__).resolve().parents[2] / "examples" / "data" / "swe_pro"
    tasks = load_swebench_jsonl(root / "instances.jsonl")
    assert {t["flavor"] for t in tasks} == {"swebench_pro"}
    rows = _validate(sandbox_url, tasks, str(root / "specs.yaml"))
    assert [r["status"] for r in rows] == ["valid"] * 4, rows


# -- compiled editable installs and what validate reports ---------------------------------------
FASTC = r"""#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *mul(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a * b);
}
static PyMethodDef methods[] = {{"mul", mul, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "fastc", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fastc(void) { return PyModule_Create(&mod); }
"""
SETUP_PY = 'from setuptools import Extension, setup\n\nsetup(name="cext", version="0.1", py_modules=["calc"], ext_modules=[Extension("fastc", ["fastc.c"])])\n'  # fmt: skip
CEXT_GOOD = "import fastc\n\n\ndef double(x):\n    return fastc.mul(x, 2)\n"
CEXT_TEST = "import calc\n\n\ndef test_mul():\n    assert calc.fastc.mul(2, 3) == 6\n"


def _cext_record(repo: str, c_source: str = FASTC) -> dict:
    """A repository whose module is a C extension: it imports only once built in place."""
    buggy = CEXT_GOOD.replace("mul(x, 2)", "mul(x, 3)")
    files = {"setup.py": SETUP_PY, "fastc.c": c_source, "calc.py": buggy, "tests/test_calc.py": CEXT_TEST}  # fmt: skip
    new_test = CEXT_TEST + "\n\ndef test_double():\n    assert calc.double(5) == 10\n"
    return {
        **_record("double", repo=repo),
        "instance_id": f"{repo.replace('/', '__')}-double",
        "patch": unified_diff("calc.py", buggy, CEXT_GOOD),
        "test_patch": unified_diff("tests/test_calc.py", CEXT_TEST, new_test),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_double"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_mul"],
        "repo_tarball": base64.b64encode(
            tarball({k: v.encode() for k, v in files.items()})
        ).decode(),
    }


def test_compiled_editable_install_is_built_in_place_with_the_host_compiler(sandbox_url, tmp_path):
    """``pip install --no-build-isolation -e .`` of a C extension: the repository stage builds
    it in place (gcc on the sandbox host) before the patch; without that step the module does
    not import, and validate's report names the step, its command, exit code and output."""
    repo = "acme/cext"
    compiled = _spec(tmp_path, "cext", ["python -m pip install --no-build-isolation -e ."], repo)
    (row,) = _validate(sandbox_url, [_cext_record(repo)], compiled)
    assert row["valid"], row
    assert any("compiled in place" in n for n in row["provision_notes"]), row
    # no install step: nothing builds fastc, the gold patch fails its tests
    (bare,) = _validate(sandbox_url, [_cext_record(repo)], _spec(tmp_path, "bare", [], repo))
    assert not bare["valid"], bare
    f = bare["failure"]
    assert (f["run"], f["step"], f["command"]) == ("gold", "tests", "pytest runner: 2 ids"), f
    assert f["exit_code"] not in (0, None), f
    assert "fastc" in f["stdout"] + f["stderr"], f
    # a compile error: the failing step is the repository stage, with gcc's message
    broken = _cext_record("acme/cext-broken", FASTC.replace("a * b", "a * b +"))
    (bad,) = _validate(sandbox_url, [broken], _spec(tmp_path, "broken", ["python setup.py develop"], "acme/cext-broken"))  # fmt: skip
    f = bad["failure"]
    assert f["step"] == "setup_command", bad
    assert "build_ext --inplace" in f["command"], f
    assert f["exit_code"] == 1, f
    assert "error" in f["stderr"], f
    assert len(f["stderr"].encode()) <= 4096


def test_agent_session_runs_the_repository_stage_and_masks_its_failure(sandbox_url, tmp_path, arun):
    """The agent's session builds the extension in place before the first turn; a build that
    fails is a masked provision failure carrying gcc's message, not a crashed rollout."""
    repo = "acme/cext"
    good = _spec(tmp_path, "cext", ["python -m pip install --no-build-isolation -e ."], repo)
    env = SweAgentEnvironment(sandbox_url, spec_files=[good], tools=["bash", "submit"])
    call = '<tool_call>{"name": "bash", "arguments": {"command": "python3 -c \'import fastc; print(fastc.mul(6, 7))\'"}}</tool_call>'  # fmt: skip

    fix = "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": "sed -i 's/mul(x, 3)/mul(x, 2)/' calc.py"}}) + "</tool_call>"  # fmt: skip
    submit = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'

    async def probe(e, task, then=()):
        state = await e.reset(task)
        try:
            first = await e.step(state, call)
            steps = [await e.step(state, t) for t in then]
            return first, steps
        finally:
            await e.close(state)

    step, (_, end) = arun(env, probe(env, _cext_record(repo), [fix, submit]))
    assert "42" in step.observation, step.observation
    # finish scores the workspace (the built extension with it) in a fresh sandbox
    assert end.done, end.metadata
    assert end.rewards[TESTS] == 1.0, end.metadata
    broken_repo = "acme/cext-broken"
    bad = _spec(tmp_path, "broken", ["python setup.py develop"], broken_repo)
    env = SweAgentEnvironment(sandbox_url, spec_files=[bad], tools=["bash", "submit"])
    step, _ = arun(env, probe(env, _cext_record(broken_repo, FASTC.replace("a * b", "a * b +"))))
    assert step.infra_error, step.metadata
    assert "setup_command failed (exit 1)" in step.metadata["provision_failed"], step.metadata
    assert "error" in step.metadata["provision_log"], step.metadata


def test_src_layout_repository_imports_after_an_editable_install(sandbox_url, tmp_path):
    """A src-layout repository (flask's): ``pip install -e .`` puts ``src/`` on the path, in
    the test runner too (a real flask instance failed 'No module named flask' without it)."""
    repo = "acme/srclayout"
    rec = _record("double", repo=repo)
    good, bad = BUGS["double"]
    buggy = GOOD.replace(good, bad)
    files = {"src/calc.py": buggy.encode(), "tests/test_calc.py": BASE_TEST.encode()}
    rec["repo_tarball"] = base64.b64encode(tarball(files)).decode()
    rec["patch"] = unified_diff("src/calc.py", buggy, GOOD)
    (row,) = _validate(sandbox_url, [rec], _spec(tmp_path, "src", INSTALL, repo))
    assert row["valid"], row


def test_the_environments_packages_come_before_the_services_own(sandbox_url, tmp_path):
    """A spec's pinned package wins over the same package of the sandbox service's installation
    in the test runner (flask 2.3's Werkzeug 2.3.7 was shadowed by the service's Werkzeug 3)."""
    repo = "acme/pins"
    files = {"calc.py": b"import idna\n", "tests/test_calc.py": b"import calc\n\n\ndef test_mul():\n    assert calc.idna.PINNED\n"}  # fmt: skip
    rec = {
        **_record("double", repo=repo),
        "repo_tarball": base64.b64encode(tarball(files)).decode(),
        "patch": "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1,2 @@\n import idna\n+X = 1\n",
        "test_patch": "",
        "FAIL_TO_PASS": ["tests/test_calc.py::test_mul"],
        "PASS_TO_PASS": [],
    }  # fmt: skip
    pin = "mkdir -p /opt/env/site/idna && echo PINNED = True > /opt/env/site/idna/__init__.py"
    (row,) = _validate(sandbox_url, [rec], _spec(tmp_path, "pins", [pin], repo))
    assert row["gold"]["resolved"], row  # the environment's idna, not the service's


# -- the layered builder ------------------------------------------------------------------------------
PY_TEST = "\n\ndef test_python():\n    import sys\n\n    assert sys.version_info[:2] == (3, 13), sys.version\n"


def _layered_spec(tmp_path: Path) -> str:
    path = tmp_path / "layered.json"
    setup = {"python": "3.13", "install": INSTALL, "test_cmd": "pytest"}
    path.write_text(json.dumps({REPO: {"1.0": setup}}))
    return str(path)


def _on_313(which: str) -> dict:
    """``_record(which)`` whose held-out tests also check the interpreter they run on: the
    spec's Python 3.13 (the image's), never the service's own."""
    rec = _record(which)
    base = BASE_TEST + PY_TEST
    rec["test_patch"] = unified_diff("tests/test_calc.py", base, base + NEW_TESTS[which])
    rec["repo_tarball"] = base64.b64encode(
        tarball(
            {"calc.py": GOOD.replace(*BUGS[which]).encode(), "tests/test_calc.py": base.encode()}
        )
    ).decode()
    rec["PASS_TO_PASS"] = [*rec["PASS_TO_PASS"], "tests/test_calc.py::test_python"]
    return rec


def test_a_task_the_service_refuses_is_a_refused_row_not_a_crash(sandbox_url, tmp_path):
    """A record naming a server repository the service does not allow (no --repo-root): the
    service answers 422, and validate reports that instance as refused with the service's reason
    while the others are validated."""
    bad = {**_record("double"), "instance_id": "acme__needsdep-server", "repo_git": str(tmp_path)}
    bad.pop("repo_tarball")
    rows = _validate(sandbox_url, [bad, _record("square")], _spec(tmp_path, "good", INSTALL))
    assert rows[0]["status"] == "refused", rows[0]
    assert "--repo-root" in rows[0]["reason"], rows[0]
    assert rows[1]["valid"], rows[1]


def test_an_unknown_builder_is_refused_before_anything_runs(tmp_path, capsys):
    """The option's pre-flight line, the constructors' error, and the CLI's exit 2 (a layered
    build needs --allow-network for the service it starts)."""
    from dockyard.train.cli import main

    assert SweEnvironment.check_options({"builder": "docker"}) == [
        "builder: 'docker' is not one of prefix, layers"
    ]
    assert SweAgentEnvironment.check_options({"builder": "layers"}) == []
    with pytest.raises(ValueError, match="one of prefix, layers"):
        SweEnvironment("http://127.0.0.1:9", builder="docker")
    with pytest.raises(ValueError, match="one of prefix, layers"):
        SweAgentEnvironment("http://127.0.0.1:9", builder="docker")
    with pytest.raises(ValueError, match="choose from prefix, layers"):
        environment_for(EnvSetup(repo=REPO, version="1.0", test_cmd="pytest"), builder="docker")
    out = str(tmp_path / "report.json")
    assert main(["swe", "validate", "shipped", "--builder", "layers", "--out", out]) == 2
    assert "add --allow-network" in capsys.readouterr().err
    assert not Path(out).exists()


def test_a_layered_spec_is_the_builders_image_with_pytest_for_the_runner(tmp_path):
    """What ``builder: layers`` hands the sandbox: the plan as an image over the spec's
    Python, WORKDIR /testbed, pytest added (noted) only where no step installs it, and the
    runner on the image's ``python``."""
    setup = EnvSetup(repo=REPO, version="1.0", python="3.13", install=INSTALL, test_cmd="pytest")
    prov = environment_for(setup, builder="layers")
    assert prov.spec is not None
    assert prov.spec.image is not None
    assert prov.python == "python"
    assert prov.spec.workdir == "/testbed"
    (stage,) = prov.spec.image.stages
    assert stage.base == "python:trixie"
    runs = [s.run for s in stage.steps if s.run]
    assert runs[-1] == "python -m pip install pytest", runs
    assert any("pip install pytest" in n for n in prov.notes)
    pinned = EnvSetup(repo=REPO, version="1.0", python="3.9", test_cmd="pytest",
                      packages=["pytest==7.1.2"])  # fmt: skip
    prov = environment_for(pinned, builder="layers")
    assert prov.spec is not None
    assert prov.spec.image is not None
    runs = [s.run for s in prov.spec.image.stages[0].steps if s.run]
    assert runs[1:] == ["python -m pip install pytest==7.1.2"], runs
    # first, SWE-bench's base image's packages (compilers for build_ext, git, locales)
    assert runs[0].startswith("apt-get update && apt-get install -y"), runs
    wanted = ("build-essential", "git", "locales-all", "python3-setuptools")
    assert all(p in runs[0].split() for p in wanted), runs
    assert prov.spec.image.stages[0].base == "python:bullseye"
    system = environment_for(setup)
    assert system.python is None
    assert system.spec is not None
    assert system.spec.image is None


def test_a_spec_built_as_an_image_runs_its_tests_on_the_images_python(
    layers_sandbox_url, tmp_path, arun
):
    """``builder: layers``: the (repo, version) spec becomes a layered image (a ``python:trixie``
    root for Python 3.13, its install steps as RUN layers, pytest added for the sandbox's runner),
    and the held-out tests run on the image's interpreter with its packages: the gold patch
    resolves (``test_python`` checks 3.13; the service runs 3.11), the empty patch does not. The
    same instance over the system builder fails ``test_python``. The agent's session is the
    image's container: its ``python`` is 3.13 with ``fastmath``, and its fix scores 1."""
    spec, task = _layered_spec(tmp_path), _on_313("double")

    async def go(builder: str) -> list[dict]:
        client = AsyncSandboxClient(layers_sandbox_url)
        try:
            return await validate(client, [task], [spec], timeout_s=120, builder=builder)
        finally:
            await client.aclose()

    (row,) = asyncio.run(go("layers"))
    assert row["valid"], row
    assert any("pip install pytest" in n for n in row["provision_notes"]), row
    (system,) = asyncio.run(go("prefix"))
    assert not system["valid"], system
    assert "test_python" in system["reason"], system

    env = SweAgentEnvironment(
        layers_sandbox_url, spec_files=[spec], tools=["bash", "submit"], builder="layers"
    )

    def call(tool, **args):
        return f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"

    probe_py = "import sys, fastmath; print(sys.version_info[:2], fastmath.mul(6, 7), __import__('os').getuid())"

    async def agent():
        state = await env.reset(task)
        try:
            probe = await env.step(state, call("bash", command=f'python -c "{probe_py}"'))
            await env.step(state, call("bash", command="sed -i 's/mul(x, 3)/mul(x, 2)/' calc.py"))
            end = await env.step(state, call("submit"))
        finally:
            await env.close(state)
        return probe, end

    probe, end = arun(env, agent())
    assert "(3, 13) 42 0" in probe.observation, probe.observation
    assert end.done, end.metadata
    assert not end.infra_error, end.metadata
    assert end.rewards[TESTS] == 1.0, end.metadata


def test_a_compiled_extension_is_built_with_the_images_compiler(layers_sandbox_url, tmp_path):
    """``builder: layers`` and a compiled editable install: the repository stage
    (``build_ext --inplace``) runs over the image, with the compiler and Python headers of
    SWE-bench's base packages in it (the service's own compilers are not in an image's jail),
    and the extension imports on the image's Python 3.13."""
    repo = "acme/cext"
    path = tmp_path / "cext.json"
    setup = {"python": "3.13", "install": ["python -m pip install --no-build-isolation -e ."],
             "test_cmd": "pytest"}  # fmt: skip
    path.write_text(json.dumps({repo: {"1.0": setup}}))
    record = _cext_record(repo)
    version = "import sys\n\n\ndef test_python():\n    assert sys.version_info[:2] == (3, 13)\n"
    record["test_patch"] += unified_diff("tests/test_py.py", "", version)
    record["PASS_TO_PASS"] = [*record["PASS_TO_PASS"], "tests/test_py.py::test_python"]

    async def go() -> list[dict]:
        client = AsyncSandboxClient(layers_sandbox_url)
        try:
            return await validate(client, [record], [str(path)], timeout_s=120, builder="layers")
        finally:
            await client.aclose()

    (row,) = asyncio.run(go())
    assert row["valid"], row
    assert any("compiled in place" in n for n in row["provision_notes"]), row
