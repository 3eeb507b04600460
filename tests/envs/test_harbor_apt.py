"""A Harbor task whose Dockerfile runs ``apt-get install`` of a package the sandbox host lacks:
the parser keeps the names, the sandbox (run with ``--allow-network``) fetches and unpacks the
package into the task's environment, and the oracle, which uses it, reaches reward 1 — against
the real service, the real apt and the host's Debian mirrors (skipped when unreachable)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.envs.harbor import HarborEnvironment, HarborFormatError, load_tasks, parse_dockerfile
from dockyard.envs.harbor.validate import validate_async
from dockyard.sandbox.egress import non_public_registries
from dockyard.sandbox.launch import start_service
from dockyard.sandbox.provision import installed_host_packages

PKG = "tree"
DOCKERFILE = f"""FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends {PKG} \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY project/ /app/project/
RUN {PKG} --noreport project > /app/at-build.txt
"""
TASK = {
    "task.toml": '[task]\nname = "dockyard/tree-listing"\n[metadata]\ncategory = "test"\n'
    "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n",
    "instruction.md": "Write the output of `tree --noreport project` into /app/listing.txt.\n",
    "environment/Dockerfile": DOCKERFILE,
    "environment/project/src/main.c": "int main(void) { return 0; }\n",
    "environment/project/README": "hello\n",
    "solution/solve.sh": "#!/bin/bash\ncd /app && tree --noreport project > listing.txt\n",
    # the verifier's own jail has the package too; it also checks the build step's output
    "tests/test.sh": "#!/bin/bash\ncd /app\n"
    'if [ -s listing.txt ] && [ "$(tree --noreport project)" = "$(cat listing.txt)" ] '
    "&& grep -q main.c at-build.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
}


def _task_dir(root: Path) -> Path:
    for rel, text in TASK.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_apt_lines_map_to_package_names(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text(
        "FROM ubuntu:22.04\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -qq "
        "install -y -o Dpkg::Options::=--force-confold tree lua5.4=5.4.4-3 && apt-get clean\n"
    )
    e = parse_dockerfile(df)
    assert e.host_packages == ["tree", "lua5.4"]
    assert e.steps == []
    assert not e.network  # the operator's --allow-network alone lets the sandbox fetch them
    for bad, why in (("-t bookworm-backports tree", "target releases"),
                     ("-y 'tree;rm'", "not a plain package name")):  # fmt: skip
        df.write_text(f"FROM ubuntu:22.04\nRUN apt-get install {bad}\n")
        with pytest.raises(HarborFormatError, match=f"{df}:2: .*{why}"):
            parse_dockerfile(df)


@pytest.fixture(scope="module")
def net_sandbox_url() -> Iterator[str]:
    if PKG in installed_host_packages():
        pytest.skip(f"{PKG} is installed on this host: nothing for provisioning to fetch")
    try:
        socket.create_connection(("deb.debian.org", 80), timeout=5).close()
    except OSError:
        pytest.skip("the Debian mirror deb.debian.org cannot be reached from this host")
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    # this host's mirrors resolve to non-public addresses: named, as their operator would
    mirrors = [a for h in non_public_registries() for a in ("--registry", h)]
    with start_service(workers=1, extra_args=["--allow-network", *mirrors]) as svc:
        yield svc.url


def test_task_with_apt_package_is_provisioned_and_solvable(net_sandbox_url, tmp_path, arun):
    tasks = load_tasks(_task_dir(tmp_path / "tree-listing"), builder="prefix")
    assert tasks[0]["environment"]["host_packages"] == [PKG]
    env = HarborEnvironment(net_sandbox_url)
    report = arun(env, validate_async(tasks, env, concurrency=2))
    row = report["tasks"][0]
    assert row["ok"], row
    assert row["oracle"]["reward"] == 1.0, row
    assert row["empty"]["reward"] == 0.0, row
    assert shutil.which(PKG) is None  # the host itself got nothing
