"""The sandbox image, built and run here: ``deploy/build.sh sandbox`` builds it without Docker or
a registry (buildah over a Debian root that mmdebstrap builds from Debian's archive), and podman
starts the service from it as the hardened pod runs it (``examples/k8s/infra/onprem-hardened.
yaml``'s profile: read-only root, the image's uid, every capability dropped, the ``Localhost``
seccomp profile of :mod:`dockyard.k8s.seccomp`, ``/proc`` unmasked — ``procMount: Unmasked``);
the service jails tasks with bubblewrap and returns their verdicts.

Root, buildah, podman and runc are what ``.ci/run`` installs; the build takes ~2 minutes cold
(the base root, the image's apt and pip steps), reused by ``--layers`` afterwards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from dockyard.k8s.infra import SandboxSecurity
from dockyard.k8s.seccomp import bwrap_profile
from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.models import Task, Verdict

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/dockyard-sandbox:dev"  # the tag examples/k8s/infra/kind-local.yaml names
# This machine's cgroups are a v1/v2 hybrid, which crun refuses: runc with the cgroupfs manager.
# The hard limits are the host's (no CAP_SYS_RESOURCE to raise them, as podman's defaults would).
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "builds and runs images as root"
    tools = [t for t in ("buildah", "podman", "runc", "mmdebstrap") if shutil.which(t) is None]
    return f"apt-get install -y {' '.join(tools)}" if tools else None


@pytest.fixture(scope="module")
def image() -> str:
    if (why := _missing()) is not None:
        pytest.skip(why)
    env = dict(os.environ)
    cert = "/etc/ssl/certs/ca-certificates.crt"  # a TLS-intercepting proxy's CA, where one is
    env.setdefault("PIP_CERT", cert)
    subprocess.run([str(ROOT / "deploy" / "build.sh"), "sandbox"], check=True, env=env)
    return IMAGE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _limits() -> list[str]:
    """Limits podman may set here: open files at the host's hard limit, processes at 4,096
    (podman's defaults are above what a process without CAP_SYS_RESOURCE may set, and runc
    refuses even the host's own hard process limit)."""
    import resource

    _, files = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = 65536 if files == resource.RLIM_INFINITY else files
    return ["--ulimit", f"nofile={files}:{files}", "--ulimit", "nproc=4096:4096"]


SEC = SandboxSecurity(capabilities=[], proc_mount="Unmasked", host_users=False)


def _hardening(tmp: Path, hardened: bool = True) -> list[str]:
    """podman's flags for the sandbox pod: read-only root, its uid, no capability; ``hardened``
    adds the strict profile's Localhost seccomp profile (made from this runtime's default by
    :mod:`dockyard.k8s.seccomp`) and ``/proc`` unmasked."""
    flags = ["--read-only", "--user", f"{SEC.run_as_user}:{SEC.run_as_group}", "--cap-drop", "ALL"]
    if hardened:
        profile = tmp / "dockyard-bwrap.json"
        default = json.loads(Path("/usr/share/containers/seccomp.json").read_text())
        profile.write_text(json.dumps(bwrap_profile(default)))
        flags += ["--security-opt", f"seccomp={profile}", "--security-opt", "unmask=ALL"]
    return [*flags, *_limits(), "--tmpfs", "/tmp:mode=1777"]


def test_the_isolation_probe_names_what_the_container_denies(image, tmp_path) -> None:
    """Under podman's defaults bwrap creates namespaces but cannot build a jail (masked /proc,
    no sethostname without the capability): the service's probe says so in bwrap's words, and
    under the hardened profile it finds nothing wrong."""
    probe = "from dockyard.sandbox.isolation import bwrap_problem; print(bwrap_problem())"
    said = {}
    for hardened in (False, True):
        run = [*PODMAN, "run", "--rm", "--network", "none", *_hardening(tmp_path, hardened),
               "--entrypoint", "python", image, "-c", probe]  # fmt: skip
        said[hardened] = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert said[True].strip() == "None"
    assert said[False].startswith("bwrap: "), said[False]


@pytest.fixture(scope="module")
def service(image: str, tmp_path_factory):
    """The service from the image, with the hardened pod's profile; (url, token)."""
    tmp = tmp_path_factory.mktemp("sandbox-image")
    for d in ("workspace", "cache"):  # the pod's emptyDirs, writable by its uid
        (tmp / d).mkdir()
        os.chown(tmp / d, SEC.run_as_user, SEC.run_as_group)
    token = "image-test-token-0123456789"
    (tmp / "token").write_text(token)
    (tmp / "token").chmod(0o644)
    port, name = _free_port(), f"dockyard-sandbox-test-{os.getpid()}"
    run = [
        *PODMAN, "run", "-d", "--rm", "--name", name, "--network", "host", *_hardening(tmp),
        "-v", f"{tmp / 'workspace'}:/workspace", "-v", f"{tmp / 'cache'}:/var/cache/dockyard",
        "-v", f"{tmp / 'token'}:/run/dockyard/token:ro",
        image, "serve", "--host", "127.0.0.1", "--port", str(port), "--work-dir", "/workspace",
        "--cache-dir", "/var/cache/dockyard", "--token-file", "/run/dockyard/token",
    ]  # fmt: skip
    subprocess.run(run, check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    logs = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
                    pytest.fail(f"the service in the image did not answer:\n{logs.stderr[-3000:]}")
                time.sleep(0.5)
        yield url, token
    finally:
        subprocess.run([*PODMAN, "rm", "-f", name], capture_output=True)


def test_the_built_image_jails_tasks_with_bubblewrap(service) -> None:
    url, token = service
    request = urllib.request.Request(
        f"{url}/healthz?detail=1", headers={"Authorization": f"Bearer {token}"}
    )
    detail = json.loads(urllib.request.urlopen(request, timeout=10).read())
    assert detail["isolation"]["mode"] == "bwrap", detail  # not the unshare fallback
    with SandboxClient(url, token=token) as sb:
        ok = sb.run_task(
            Task(
                files={"solution.py": "def add(a, b):\n    return a + b\n"},
                test_command="python -c 'from solution import add; assert add(2, 3) == 5'",
            )
        )
        assert ok.verdict == Verdict.passed, (ok.stdout, ok.stderr)
        wrong = sb.run_task(
            Task(
                files={"solution.py": "def add(a, b):\n    return a - b\n"},
                test_command="python -c 'from solution import add; assert add(2, 3) == 5'",
            )
        )
        assert wrong.verdict == Verdict.failed, wrong
        # the jail: no network, and the host's files out of reach
        probe = sb.run_task(
            Task(
                test_command="cat /run/dockyard/token; python -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\""
            )
        )
        assert probe.verdict == Verdict.failed
        assert token not in probe.stdout
    with SandboxClient(url, token="wrong") as sb, pytest.raises(SandboxRequestError) as refused:
        sb.run_task(Task(test_command="true"))
    assert refused.value.status == 401
