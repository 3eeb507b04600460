"""Facts the sandbox-hardening section of docs/deployment.md leans on, checked on this machine."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed: apt-get install -y bubblewrap",
)

ARGS = [
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "grep",
    "NoNewPrivs",
    "/proc/self/status",
]


def test_bwrap_sets_no_new_privs_on_the_jailed_process() -> None:
    out = subprocess.run(["bwrap", *ARGS], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["NoNewPrivs:", "1"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root to switch to an unprivileged uid",
)
def test_unprivileged_bwrap_with_a_user_namespace_sets_no_new_privs_too() -> None:
    """The path a runAsNonRoot sandbox pod takes: no capabilities at all (empty bounding set),
    new user, pid and network namespaces. bubblewrap needs no capability of its own; in a pod,
    SYS_ADMIN only opens the RuntimeDefault seccomp gate (no seccomp filter applies here)."""
    cmd = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]
    ns = ["--unshare-user", "--unshare-pid", "--unshare-net"]
    out = subprocess.run([*cmd, "bwrap", *ns, *ARGS], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 and "namespace" in out.stderr.lower():
        pytest.skip(
            f"unprivileged user namespaces are disabled on this kernel: {out.stderr.strip()}"
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["NoNewPrivs:", "1"]
