"""SWE-bench specs translated into build plans (dockyard.envs.swe.plan / render), on the real
entries of the installed swebench package; no sandbox here (test_swe_provision.py builds)."""

from __future__ import annotations

import base64
import io
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.plan import BUILD_EXT, conda_to_pip, plan_for
from dockyard.envs.swe.provision import environment_for, layered_image, setup_plan
from dockyard.envs.swe.repofiles import GitFiles, TarFiles
from dockyard.envs.swe.specs import EnvSetup, swebench_setup
from dockyard.envs.swe.tables import debian_name, nearest_release

pytest.importorskip("swebench")


def _setup(repo: str, version: str) -> EnvSetup:
    s = swebench_setup(repo, version)
    assert s is not None
    return s


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_packages_are_read_with_shell_rules():
    """scikit-learn 1.3's ``packages`` quotes its pins: pip must get them without the quotes
    (the split on spaces handed pip ``'numpy==1.19.2'``, quotes included)."""
    s = _setup("scikit-learn/scikit-learn", "1.3")
    assert s.conda_packages[:3] == ["numpy==1.19.2", "scipy==1.5.2", "cython==3.0.10"]
    assert not any("'" in p for p in s.conda_packages)
    spec = environment_for(s).spec
    assert spec is not None
    first = spec.steps[0].run
    assert first is not None
    assert shlex.split(first)[2:5] == ["numpy==1.19.2", "scipy==1.5.2", "cython==3.0.10"]
    assert "pandas<2.0.0" in shlex.split(first)


def test_compiled_editable_installs_build_in_place_with_the_host_compilers():
    for repo, version in [
        ("scikit-learn/scikit-learn", "1.3"),  # --no-use-pep517 --no-build-isolation -e .
        ("matplotlib/matplotlib", "3.8"),  # --no-build-isolation -e ".[dev]"
        ("astropy/astropy", "5.1"),  # -e .[test]: a compiled repository
        ("django/django", "2.2"),  # python setup.py install
    ]:
        plan = setup_plan(_setup(repo, version))
        assert [s.value for s in plan.repository if s.value == BUILD_EXT], (repo, plan.as_dict())
        assert any("compiled in place" in n for n in plan.notes), (repo, plan.notes)
    # the repository's edits run in the repository, before its build, in the spec's order
    sphinx = setup_plan(_setup("sphinx-doc/sphinx", "3.5"))
    assert [s.source for s in sphinx.repository][:2] == ["pre_install[0]", "pre_install[1]"]
    deps = [s for s in sphinx.environment if s.op == "repo_deps"]
    assert deps
    assert deps[0].value["extras"] == ["test"]
    assert deps[0].value["prepare"][1].startswith("sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py")


def test_conda_steps_become_pip_or_debian_or_are_refused_with_the_reason():
    assert conda_to_pip("numpy=1.19") == ("pip", "numpy==1.19.*")
    assert conda_to_pip("numpy==1.19.2") == ("pip", "numpy==1.19.2")
    assert conda_to_pip("pytorch>=2") == ("pip", "torch>=2")
    assert conda_to_pip("hdf5") == ("apt", "libhdf5-dev")
    assert conda_to_pip("python=3.9")[0] == "skip"
    with pytest.raises(StepRefused, match=r"cdms2.*conda only"):
        conda_to_pip("cdms2")
    setup = EnvSetup("acme/x", "1", "pytest", install=["conda install -y numpy=1.2 graphviz"], source="swebench")  # fmt: skip
    plan = plan_for(setup)
    assert [(s.op, s.value) for s in plan.environment] == [
        ("apt", ["graphviz"]), ("pip", ["numpy==1.2.*"])
    ]  # fmt: skip
    # environment.yml (xarray's): conda dependencies through the tables, its pip list as is
    xr = setup_plan(_setup("pydata/xarray", "2022.06"))
    yml = "dependencies:\n  - python=3.10\n  - numpy\n  - dask-core\n  - hdf5\n  - pip\n  - pip:\n    - numbagg\n"
    files = TarFiles(_tar({"ci/requirements/environment.yml": yml}))
    prov = environment_for(_setup("pydata/xarray", "2022.06"), files=files)
    assert prov.spec is not None
    runs = [s.run for s in prov.spec.steps]
    assert "pip install numpy dask" in runs, runs
    assert "pip install numbagg" in runs, runs
    assert "libhdf5-dev" in prov.spec.host_packages
    assert xr.reads_repository
    bad = TarFiles(_tar({"ci/requirements/environment.yml": yml + "  - cdms2\n"}))
    with pytest.raises(
        StepRefused, match=r"pydata/xarray 2022\.06 packages: conda package 'cdms2'"
    ):
        environment_for(_setup("pydata/xarray", "2022.06"), files=bad)


def test_every_refusal_names_the_step_and_its_text():
    jq = _setup("jqlang/jq", "2839")
    with pytest.raises(StepRefused) as e:
        setup_plan(jq)
    assert "jqlang/jq 2839 build[0] 'git submodule update --init'" in str(e.value)
    assert "git host" in str(e.value)
    with pytest.raises(StepRefused, match=r"acme/x 1 pre_install\[1\] 'curl -L https://x.org/a': downloads from x.org"):  # fmt: skip
        plan_for(EnvSetup("acme/x", "1", "t", pre_install=["true", "curl -L https://x.org/a"], source="swebench"))  # fmt: skip
    with pytest.raises(StepRefused, match=r"needs crates\.io"):
        setup_plan(_setup("tokio-rs/tokio", "6724"))


def test_debian_names_and_python_releases():
    assert debian_name("libgl1-mesa-glx", "bookworm") == "libgl1"
    assert debian_name("libasound2", "trixie") == "libasound2t64"
    assert nearest_release("3.9") == ("bullseye", "")
    assert nearest_release("3.10")[0] == "bullseye"  # a tie goes to the older release
    assert nearest_release("3.12")[0] == "bookworm"
    assert "nearest" in nearest_release("3.6")[1]
    # matplotlib's qhull download becomes Debian's libqhull-dev, used through mplsetup.cfg
    mpl = setup_plan(_setup("matplotlib/matplotlib", "3.5"))
    assert any(s.op == "apt" and "libqhull-dev" in s.value for s in mpl.environment)
    assert "system_qhull = true" in mpl.repository[0].value


def test_requirements_file_is_read_at_the_environment_setup_commit(tmp_path: Path):
    """flask's ``packages: requirements.txt``: requirements/dev.txt of a real git clone at the
    given commit, ``-r`` inlined and ``-e .`` dropped as SWE-bench does; a later commit's
    change is not seen."""

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True).stdout  # fmt: skip

    git("init", "-q")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements/base.txt").write_text("click==8.0.1\n")
    (tmp_path / "requirements/dev.txt").write_text("# dev\n-r base.txt\n-e .\npytest==7.1.2\n")
    git("add", ".")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "env")
    commit = git("rev-parse", "HEAD").strip()
    (tmp_path / "requirements/dev.txt").write_text("pytest==8\n")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "later")
    prov = environment_for(_setup("pallets/flask", "2.0"), files=GitFiles(tmp_path, commit))
    assert prov.spec is not None
    files = [s.files for s in prov.spec.steps if s.files]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(files[0]))) as tar:
        f = tar.extractfile("dockyard-requirements.txt")
        assert f is not None
        text = f.read().decode()
    assert text.split() == ["click==8.0.1", "pytest==7.1.2"]
    assert "pip install -r dockyard-requirements.txt" in [s.run for s in prov.spec.steps]


def test_layered_image_is_the_builders_step_list():
    """The plan as the layered builder's ImageSpec: one python:<release> stage, ENV / RUN /
    COPY steps in the plan's order (django 2.2: locales generated, requirements copied)."""
    files = TarFiles(_tar({"tests/requirements/py3.txt": "asgiref\n-e .\n"}))
    img = layered_image(_setup("django/django", "2.2"), files)
    (stage,) = img["stages"]
    assert stage["base"] == "python:bullseye"
    ops = [next(iter(k for k in s if k != "source")) for s in stage["steps"]]
    assert ops[0] == "workdir"
    assert "copy" in ops
    assert "env" in ops
    runs = [s["run"] for s in stage["steps"] if "run" in s]
    assert any("locale-gen en_US.UTF-8" in r for r in runs), runs
    # SWE-bench's order: the environment (requirements, pip_packages), then pre_install
    assert runs.index("python -m pip install setuptools") < runs.index(
        "apt-get update && apt-get install -y --no-install-recommends locales"
    ), runs
    assert any("nearest" in n for n in img["notes"])
    # a COPY's payload is what the builder reads: an uncompressed tar of s0, s1, ...
    (copy,) = [s["copy"] for s in stage["steps"] if "copy" in s]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(copy["files"])), mode="r:") as tf:
        assert tf.getnames() == ["s0"]
        assert b"asgiref" in tf.extractfile("s0").read()  # type: ignore[union-attr]


def test_every_python_spec_of_swebench_translates():
    """The figure of docs/envs/swe-agent.md (bench/swe_spec_coverage.py): all 193 specs of the
    12 original repositories translate, astropy / matplotlib / flask / xarray / pylint / sphinx
    among them (0 before)."""
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS

    n = 0
    for repo, versions in MAP_REPO_VERSION_TO_SPECS.items():
        if MAP_REPO_TO_EXT.get(repo) != "py":
            continue
        for version in versions:
            setup_plan(_setup(repo, version))
            n += 1
    assert n >= 193


def test_editable_installs_put_src_and_lib_layouts_on_the_path():
    """flask keeps its package in src/, matplotlib in lib/: an editable install puts them on the
    path, and so does the plan (a real flask instance failed 'No module named flask' without)."""
    files = TarFiles(_tar({"requirements/dev.txt": "pytest\n"}))
    prov = environment_for(_setup("pallets/flask", "2.3"), files=files)
    assert prov.spec is not None
    assert prov.spec.env["PYTHONPATH"] == "/workspace/src:/workspace/lib:/opt/env/site"
    assert prov.spec.env["DOCKYARD_ENV_SITE"] == prov.spec.env["PYTHONPATH"]  # python -I
    img = layered_image(_setup("pallets/flask", "2.3"), files)
    path = "/testbed/src:/testbed/lib"
    assert {"env": {"PYTHONPATH": path, "DOCKYARD_ENV_SITE": path}} in img["stages"][0]["steps"]
