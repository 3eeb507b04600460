"""These checks hold the Containerfiles to what the rendered manifests assume, so the two cannot
drift apart silently (the sandbox image is also built and run: tests/k8s/test_image_build.py)."""

from __future__ import annotations

import re
from pathlib import Path

from dockyard.k8s.infra import SandboxSecurity
from dockyard.k8s.recipe import RaySettings
from dockyard.k8s.render import sandbox

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _instructions(path: Path) -> list[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_sandbox_image_matches_the_rendered_pod() -> None:
    lines = _instructions(DEPLOY / "Containerfile.sandbox")
    sec = SandboxSecurity()
    assert f"USER {sec.run_as_user}:{sec.run_as_group}" in lines
    run = " ".join(line for line in lines if line.startswith("RUN "))
    assert "bubblewrap" in run
    assert "util-linux" in run
    assert f"--uid {sec.run_as_user}" in run
    for path in (sandbox.WORKSPACE, sandbox.CACHE):
        assert path in run, f"{path} is not created in the image"
    assert (
        "chmod a-s" in run
    )  # no setuid binaries: allowPrivilegeEscalation cannot be false with SYS_ADMIN
    assert 'ENTRYPOINT ["dockyard-sandbox"]' in lines


def test_runtime_image_has_the_ray_the_manifests_declare() -> None:
    lines = _instructions(DEPLOY / "Containerfile.runtime")
    default_ray = RaySettings().ray_version
    assert f"ARG RAY_VERSION={default_ray}" in lines
    run = " ".join(line for line in lines if line.startswith("RUN "))
    assert '"ray[default]==${RAY_VERSION}"' in run  # the job server KubeRay submits RayJobs through
    assert "dockyard-train" in run
    assert "dockyard-torch" in run
    assert "dockyard-serve[vllm]" in run
    assert "USER 1000" in lines
