"""Harbor task directories read as layered images (``harbor/image.py``, ``harbor/bases.py``):
what is refused at load time (with its line and reason), what is approximated (and said so),
and the shipped Terminal-Bench-2-shaped tasks validated against the real sandbox."""

from __future__ import annotations

import base64
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from dockyard.envs.harbor import HarborEnvironment, HarborFormatError, load_tasks
from dockyard.envs.harbor.bases import UnmappableBase, choose
from dockyard.envs.harbor.image import read_image
from dockyard.envs.harbor.tasks import SHIPPED_TB2, harbor_dataset
from dockyard.envs.harbor.validate import report_table, validate_async
from dockyard.sandbox.envspec import EnvSpec


def _df(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    p = tmp_path / "Dockerfile"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("image", "base", "approximated"),
    [
        ("python:3.13-slim", "python:trixie", False),
        ("python:3.11-slim-bookworm", "python:bookworm", False),
        ("python:3.9", "python:bullseye", False),
        ("python:3.12", "python:trixie", True),  # no Debian release ships 3.12: nearest, said so
        ("debian:bookworm-slim", "debian:bookworm", False),
        ("debian:12", "debian:bookworm", False),
        ("ubuntu:24.04", "debian:trixie", True),
        ("ubuntu:22.04", "debian:bookworm", True),
        ("docker.io/library/python:3.13@sha256:" + "0" * 64, "python:trixie", True),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "python:trixie", True),
    ],
)
def test_bases_map_to_debian_roots(image: str, base: str, approximated: bool) -> None:
    got = choose(image)
    assert got.base == base
    assert bool(got.note) == approximated, got.note


def test_operator_table_extends_the_bases(tmp_path: Path) -> None:
    with pytest.raises(UnmappableBase, match="node:20"):
        choose("node:20")
    table = tmp_path / "bases.toml"
    table.write_text('[images]\n"node:20" = "debian:bookworm"\n')
    got = choose("node:20", table=str(table))
    assert got.base == "debian:bookworm"
    assert "operator" in got.note


def test_dockerfile_reads_as_stages_and_layers(tmp_path: Path) -> None:
    p = _df(
        tmp_path,
        """# a comment
ARG PY=3.13
FROM python:${PY}-slim AS build
WORKDIR /src
COPY tool/ ./tool/
RUN ["python3", "-m", "compileall", "tool"]
FROM ubuntu:24.04
ENV APP=/app \\
    PATH=/opt/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN <<EOF
mkdir -p /fonts
echo hi > /etc/hi.conf
EOF
WORKDIR $APP
COPY --from=build /src/tool /opt/tool
COPY a.txt b.txt ./
COPY --chown=1000:1000 --chmod=0755 run.sh /usr/local/bin/run
USER nobody
EXPOSE 8080
CMD ["bash"]
""",
        {"tool/x.py": "x = 1\n", "a.txt": "a", "b.txt": "b", "run.sh": "#!/bin/sh\n"},
    )
    img = read_image(p)
    build, final = img.stages
    assert build["name"] == "build"
    assert build["base"] == "python:trixie"
    assert build["steps"][2] == {"run": "python3 -m compileall tool"}
    assert final["base"] == "debian:trixie"
    assert img.workdir == "/app"
    steps = final["steps"]
    assert steps[0] == {
        "env": {
            "APP": "/app",
            "PATH": "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        }
    }
    assert steps[1]["run"].startswith(
        "/bin/bash -o pipefail -c 'mkdir -p /fonts"
    )  # heredoc body, SHELL
    assert steps[2] == {"workdir": "/app"}
    assert steps[3]["copy"]["from_stage"] == "build"
    assert steps[3]["copy"]["paths"] == ["/src/tool"]
    two = steps[4]["copy"]
    assert two["names"] == ["a.txt", "b.txt"]
    assert two["dest"] == "./"
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(two["files"]))) as tf:
        assert [(m.name, m.mtime, m.uid) for m in tf.getmembers()] == [("s0", 0, 0), ("s1", 0, 0)]
    assert steps[5]["copy"]["chown"] == "1000:1000"
    assert steps[5]["copy"]["chmod"] == "0755"
    assert steps[6] == {"user": "nobody"}
    notes = " ".join(img.notes)
    assert "ubuntu:24.04 approximated by Debian trixie" in notes
    assert "EXPOSE ignored" in notes
    EnvSpec.model_validate(img.spec())  # what the sandbox accepts


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("FROM alpine:3.19\n", 1, "no Debian root approximates"),
        (
            "FROM debian:bookworm\n\nRUN curl -fsSL https://github.com/x/y/releases/z.tgz | tar xz\n",
            3,
            "downloads from github.com",
        ),
        ("FROM debian:bookworm\nADD https://example.com/f.tgz /opt/\n", 2, "ADD of a URL"),
        (
            "FROM debian:bookworm\nRUN --mount=type=cache,target=/root/.cache pip install x\n",
            2,
            "RUN --mount",
        ),
        ("FROM debian:bookworm\nCOPY a.txt a.txt /dst\n", 2, "destination ending in /"),
        ("FROM debian:bookworm\nCOPY --from=nowhere /x /y\n", 2, "not an earlier stage"),
        ("FROM debian:bookworm\nCOPY missing.txt /x\n", 2, "no such file"),
        ("FROM debian:bookworm\nONBUILD RUN true\n", 2, "ONBUILD"),
        ("RUN true\nFROM debian:bookworm\n", 1, "RUN before FROM"),
    ],
)
def test_refused_at_load_with_line_and_reason(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    p = _df(tmp_path, text, {"a.txt": "a"})
    with pytest.raises(HarborFormatError, match=rf"Dockerfile:{line}: .*{reason}"):
        read_image(p)


def test_pip_and_apt_registries_are_not_refused(tmp_path: Path, monkeypatch) -> None:
    p = _df(
        tmp_path, "FROM debian:trixie\nRUN pip download --index-url https://pypi.org/simple x\n"
    )
    assert read_image(p).stages[0]["steps"][0]["run"].startswith("pip download")
    mirror = _df(tmp_path, "FROM debian:trixie\nRUN curl -O https://mirror.corp.example/x.tgz\n")
    with pytest.raises(HarborFormatError, match=r"mirror\.corp\.example"):
        read_image(mirror)
    monkeypatch.setenv("DOCKYARD_HARBOR_REGISTRIES", "mirror.corp.example")  # the operator's
    assert read_image(mirror).stages[0]["steps"][0]["run"].startswith("curl")


def _task(
    tmp_path: Path, toml: str, dockerfile: str | None = "FROM debian:trixie\nWORKDIR /app\n"
) -> Path:
    d = tmp_path / "t"
    (d / "tests").mkdir(parents=True)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (d / "instruction.md").write_text("do it\n")
    (d / "task.toml").write_text(toml)
    if dockerfile is not None:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    return d


def test_docker_image_ignored_beside_a_dockerfile_and_a_hint_without(tmp_path: Path) -> None:
    toml = '[environment]\ndocker_image = "alexgshaw/some-task:20251031"\nmemory = "2G"\nstorage = "10G"\n'
    t = load_tasks(_task(tmp_path, toml))[0]
    assert any("docker_image" in n and "ignored" in n for n in t["notes"])
    assert t["limits"] == {"memory_mb": 2048, "disk_mb": 4096}  # storage capped at 4096
    shutil.rmtree(tmp_path / "t")
    with pytest.raises(HarborFormatError, match=r"task\.toml.*docker_image.*alexgshaw/some-task"):
        load_tasks(_task(tmp_path, toml, dockerfile=None))  # a private image: nothing maps it
    shutil.rmtree(tmp_path / "t")
    hinted = load_tasks(
        _task(tmp_path, '[environment]\ndocker_image = "python:3.11-slim"\n', None)
    )[0]
    assert hinted["environment"]["image"]["stages"][0]["base"] == "python:bookworm"
    assert any("base hint" in n for n in hinted["notes"])


def test_gpus_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(HarborFormatError, match="gpus = 1: the sandbox has no GPUs"):
        load_tasks(_task(tmp_path, "[environment]\ngpus = 1\n"))


def test_multi_container_tasks_refused_at_load(tmp_path: Path) -> None:
    d = _task(tmp_path, "[environment]\n")
    (d / "environment" / "docker-compose.yaml").write_text("services:\n  tools:\n    build: .\n")
    with pytest.raises(HarborFormatError, match=r"docker-compose\.yaml: a multi-container task"):
        load_tasks(d)


def test_binary_test_files_travel_as_bytes(tmp_path: Path) -> None:
    """A published task's test fixtures may be images: they travel base64 beside the texts
    (the verifier gets the same bytes at /tests); a binary solution file is still refused."""
    d = _task(tmp_path, "[environment]\n")
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    (d / "tests" / "masks").mkdir()
    (d / "tests" / "masks" / "a.png").write_bytes(png)
    (task,) = load_tasks(d)
    assert set(task["tests"]) == {"test.sh"}
    assert base64.b64decode(task["tests_binary"]["masks/a.png"]) == png
    req = HarborEnvironment("http://127.0.0.1:9").finish_request(task)
    assert req.script is not None
    assert req.script.binary_files == task["tests_binary"]
    assert req.script.egress  # a layered image's verifier reaches the registries
    (d / "solution").mkdir()
    (d / "solution" / "solve.sh").write_bytes(b"\xff\xfe")
    with pytest.raises(HarborFormatError, match="solution/ files travel as text"):
        load_tasks(d)


SHIPPED_TB2_TASKS = load_tasks(SHIPPED_TB2)


def test_shipped_tb2_tasks_have_the_published_shape() -> None:
    assert len(SHIPPED_TB2_TASKS) >= 10
    preambles = {t["tests"]["test.sh"] for t in SHIPPED_TB2_TASKS}
    assert len(preambles) == 1  # one shared verifier script, as in the published set
    (sh,) = preambles
    assert "uvx" in sh
    assert "-p 3.13" in sh
    assert "astral.sh/uv" in sh
    assert "apt-get install -y curl" in sh
    froms = set()
    for t in SHIPPED_TB2_TASKS:
        toml = (Path(t["path"]) / "task.toml").read_text()
        assert "docker_image" in toml
        dockerfile = (Path(t["path"]) / "environment" / "Dockerfile").read_text()
        # nothing of the verifier baked in: its preamble installs curl, uv and pytest itself
        assert not any(w in dockerfile for w in ("uv==", "pytest", "UV_", "verifier")), t["id"]
        froms |= {st["base"] for st in t["environment"]["image"]["stages"]}
    assert froms == {"python:trixie", "debian:trixie"}  # python:3.13-slim and ubuntu:24.04
    assert sum(len(t["environment"]["image"]["stages"]) > 1 for t in SHIPPED_TB2_TASKS) >= 1


@pytest.mark.slow
def test_validate_shipped_tb2_tasks(layers_sandbox_url: str, arun) -> None:
    """Every shipped TB2-shaped task: oracle 1, empty agent < 1, built and verified offline
    (registries only) on the real sandbox, the published verifier as is (as the image's root:
    ``apt-get install curl`` through the proxy, uv's install script from the installer table,
    ``uvx`` resolving pytest from PyPI); the report carries the verifier's output."""
    env = HarborEnvironment(layers_sandbox_url, finish_timeout_s=300)
    report = arun(env, validate_async(SHIPPED_TB2_TASKS, env, concurrency=4))
    print(report_table(report))
    bad = [r for r in report["tasks"] if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[:8000]
    for r in report["tasks"]:
        out = r["empty"]["verifier_stdout"]
        assert "FAILED" in out, r["id"]  # pytest's own summary
        assert "newly installed" in out, r["id"]  # apt-get as the image's root, via the proxy
        assert "verifier_stdout" not in r["oracle"]  # passing cases stay short


def test_a_folder_loads_around_its_refused_tasks(tmp_path: Path) -> None:
    """A published set has tasks that cannot run here: with a ``refused`` list the others
    load and each refusal is kept with its reason; without it the first one raises."""
    good = _task(tmp_path / "a", "[environment]\n")
    bad = _task(tmp_path / "b", "[environment]\ngpus = 2\n")
    folder = tmp_path / "set"
    folder.mkdir()
    good.rename(folder / "good")
    bad.rename(folder / "bad")
    refused: list[dict[str, str]] = []
    tasks = load_tasks(folder, refused=refused)
    assert [t["id"] for t in tasks] == ["good"]
    assert [r["id"] for r in refused] == ["bad"]
    assert "gpus = 2" in refused[0]["refused"]
    with pytest.raises(HarborFormatError, match="gpus = 2"):
        load_tasks(folder)
    with pytest.warns(UserWarning, match="left out bad"):
        assert len(harbor_dataset(path=str(folder), skip_refused=True)) == 1
