"""``host_packages`` the sandbox host lacks: fetched by apt in a jail, unpacked rootless into the
environment's prefix (``dockyard.sandbox.debs``), against the real service, the real apt and the
host's real Debian mirrors (skipped when they cannot be reached). Threat rows 5/13/18/19: the
packages land only in the build's prefix, set-id bits are cleared, special files refused,
package names never become options."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.debs import DebError, apt_jail, failure, missing_packages, sanitize
from dockyard.sandbox.egress import MOUNT
from dockyard.sandbox.envspec import EnvSpec
from dockyard.sandbox.models import Limits, Verdict
from dockyard.sandbox.provision import installed_host_packages

# Small packages a plain Debian 12 host lacks: ``tree`` (no library), ``lzop`` (needs liblzo2-2,
# a library most hosts lack too: it must come from the prefix via LD_LIBRARY_PATH).
TOOLS = {"tree": "tree --version", "lzop": "lzop --version"}
MIRROR = "deb.debian.org"
NO_LIMITS = Limits.model_validate({})


def _deb(tmp: Path, files: dict[str, tuple[int, bytes | str]]) -> Path:
    """A hand-made .deb (``dpkg-deb -b``): path -> (mode, content; a str is a symlink target)."""
    src = tmp / "src"
    (src / "DEBIAN").mkdir(parents=True)
    (src / "DEBIAN" / "control").write_text(
        "Package: dockyard-test\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: test\n"
    )
    for rel, (mode, body) in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, str):
            os.symlink(body, p)
        else:
            p.write_bytes(body)
            os.chmod(p, mode)
    out = tmp / "t.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(src), str(out)], check=True,
                   capture_output=True)  # fmt: skip
    return out


# -- unit: the unpacked tree, names, messages --------------------------------------------------
@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_sanitize_clears_setid_and_rewrites_links_into_the_prefix(tmp_path):
    deb = _deb(tmp_path, {
        "usr/bin/suid": (0o4755, b"#!/bin/sh\necho hi\n"),
        "usr/bin/sgid": (0o2755, b"x"),
        "usr/lib/x/data": (0o644, b"d"),
        "usr/bin/inside": (0, "/usr/lib/x/data"),  # shipped by the package: into the prefix
        "usr/bin/system": (0, "/etc/alternatives/system"),  # not shipped: kept (dangles)
        "usr/bin/rel": (0, "../lib/x/data"),
    })  # fmt: skip
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    for rel, bits in (("usr/bin/suid", 0o4755), ("usr/bin/sgid", 0o2755)):
        os.chmod(root / rel, bits)  # as an unprivileged extractor might not keep them
    assert sanitize(root) == (2, 1)
    assert stat.S_IMODE(os.lstat(root / "usr/bin/suid").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(root / "usr/bin/sgid").st_mode) == 0o755
    assert os.readlink(root / "usr/bin/inside") == "/opt/env/root/usr/lib/x/data"
    assert os.readlink(root / "usr/bin/system") == "/etc/alternatives/system"
    assert os.readlink(root / "usr/bin/rel") == "../lib/x/data"
    os.mkfifo(root / "usr/bin/pipe")
    with pytest.raises(DebError, match="usr/bin/pipe"):
        sanitize(root)


def test_names_and_messages():
    assert missing_packages(["bash", "tree", "bash:amd64", "x"], {"bash"}) == ["tree", "x"]
    with pytest.raises(ValueError, match="not a Debian package name"):
        apt_jail(["--allow-unauthenticated"], Path("/x"), Path("/y"), 1000, NO_LIMITS, 10)
    js = apt_jail(["tree"], Path("/x"), Path("/y"), 1000, NO_LIMITS, 10)
    assert js.argv[-2:] == ["apt-provision", "tree"]  # "$@" of the script, after `--` there
    assert "$(" not in " ".join(js.env.values())  # a fixed environment, none of the spec's
    # never the host network: its own namespace, out only through the build's registry proxy
    assert not js.network
    js = apt_jail(["tree"], Path("/x"), Path("/y"), 1000, NO_LIMITS, 10, proxy=("/p", MOUNT))
    assert not js.network
    assert ("/p", MOUNT) in js.ro_binds
    assert js.env["http_proxy"] == js.env["https_proxy"] == "http://127.0.0.1:3128/"
    assert js.argv[:2] == ["/bin/sh", "-c"]
    assert js.argv[-2:] == ["apt-provision", "tree"]
    msg = failure(11, ["nope"], "E: Unable to locate package nope\n")
    assert "['nope']" in msg
    assert "Unable to locate package nope" in msg
    assert "apt-get install -y nope" in msg  # the next step


# -- the service with --allow-network ---------------------------------------------------------
@pytest.fixture
def apt_sandbox(net_sandbox: SandboxClient, reachable) -> SandboxClient:
    """The ``--allow-network`` service (conftest), when the Debian mirror can be reached."""
    if not reachable(MIRROR, 80):
        pytest.skip(f"the Debian mirror {MIRROR} cannot be reached from this host")
    return net_sandbox


def _missing_tools() -> list[str]:
    missing = missing_packages(list(TOOLS), installed_host_packages())
    if not missing:
        pytest.skip(f"{list(TOOLS)} are all installed on this host: nothing to provision")
    return missing


def test_missing_packages_are_provisioned_rootless(apt_sandbox: SandboxClient):
    pkgs = _missing_tools()
    lib_missing = "liblzo2-2" not in installed_host_packages()
    spec = EnvSpec.model_validate({
        "workdir": "/app", "host_packages": ["bash", *pkgs],  # bash: on the host, untouched
        "steps": [{"run": f"{TOOLS[pkgs[0]]} > built-with.txt"}],  # steps see them too
    })  # fmt: skip
    sid = apt_sandbox.create_session({"environment": spec.model_dump()})
    try:
        cmds = "; ".join(TOOLS[p] for p in pkgs)
        r = apt_sandbox.exec(sid, f"set -e; {cmds}; cat built-with.txt; command -v {pkgs[0]}")
        assert r.exit_code == 0, r
        for p in pkgs:
            assert p in r.stdout.lower(), r.stdout
        assert r.stdout.strip().endswith(f"/opt/env/root/usr/bin/{pkgs[0]}")
        if "lzop" in pkgs and lib_missing:  # the library came from the prefix
            lib = apt_sandbox.exec(sid, "ldd $(command -v lzop) | grep liblzo2")
            assert "=> /opt/env/root/" in lib.stdout, lib
        # read-only, nothing of it on the host, no set-id file anywhere in it
        r = apt_sandbox.exec(
            sid, "touch /opt/env/root/x 2>&1; find /opt/env/root -perm /6000 | wc -l"
        )
        assert "Read-only file system" in r.stdout
        assert r.stdout.split()[-1] == "0"
    finally:
        apt_sandbox.delete_session(sid)
    assert all(shutil.which(p) is None for p in pkgs)  # never installed on the host
    # a one-shot task naming the (now cached) environment runs them too
    res = apt_sandbox.run_task({"test_command": TOOLS[pkgs[-1]], "environment": spec.model_dump()})
    assert res.verdict == Verdict.passed, res
    assert pkgs[-1] in (res.stdout + res.stderr).lower()


def test_unknown_package_fails_with_apt_output(apt_sandbox: SandboxClient):
    spec = EnvSpec.model_validate({"host_packages": ["dockyard-no-such-package"]})
    with pytest.raises(SandboxRequestError) as e:
        apt_sandbox.create_session({"environment": spec.model_dump()})
    assert e.value.status == 422
    assert "dockyard-no-such-package" in e.value.detail["provision_failed"]
    assert "Unable to locate package" in e.value.detail["log"]
