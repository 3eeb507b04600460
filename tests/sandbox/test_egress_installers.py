"""The installer table (issue 35 item 3): ``curl -LsSf https://astral.sh/uv/install.sh | sh`` on
a node that reaches only the registries.

Unit: the proxy answers a table URL itself over TLS with the service's CA (verified with that
CA only, for the table host only: the CA's name constraint), answers 404 for other paths of a
table host and 403 for a host outside the table and the registries, and reports both in
``Proxy.refused_hosts()``. Real: a build step in a real jail of the real service runs the
vendor's documented one-liner, then ``uvx -w pytest pytest --version`` through the proxy to
PyPI, and a managed-Python download (github.com) that is refused and named (skipped, with the
reason, when PyPI cannot be reached from this host).
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.egress import (
    CA_BUNDLE,
    CA_FILE,
    SOCKET,
    Allowlist,
    InstallerTable,
    Proxy,
    install_script,
)
from dockyard.sandbox.egress.tls import authority, system_roots
from dockyard.sandbox.egress.wheels import platform_ok
from dockyard.sandbox.envspec import EnvSpec

ALLOW = Allowlist(frozenset({"pypi.org"}))


def _https(sock_path: Path, cafile: Path, host: str, path: str) -> bytes:
    """GET https://host/path through the proxy's socket (CONNECT, then TLS trusting cafile)."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(10)
    raw.connect(str(sock_path))
    raw.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    answer = raw.recv(4096)
    if not answer.startswith(b"HTTP/1.1 200"):
        raw.close()
        return answer
    ctx = ssl.create_default_context(cafile=str(cafile))
    with ctx.wrap_socket(raw, server_hostname=host) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_table_urls_are_answered_over_tls_by_the_proxy_and_others_refused(tmp_path: Path):
    d = tmp_path / "egress"
    with Proxy(d, os.getuid(), ALLOW) as p:
        # the jail's trust files: the CA alone, and the host's public roots + the CA
        ca = (d / CA_FILE).read_bytes()
        assert (d / CA_BUNDLE).read_bytes().endswith(ca)
        assert system_roots().strip() in (d / CA_BUNDLE).read_bytes()
        out = _https(d / SOCKET, d / CA_FILE, "astral.sh", "/uv/0.9.5/install.sh")
        assert out.startswith(b"HTTP/1.1 200 OK"), out
        script = out.split(b"\r\n\r\n", 1)[1].decode()
        assert "https://astral.sh/.dockyard/uv/0.9.5/$arch-$libc/$b" in script
        assert "${UV_INSTALL_DIR:-${XDG_BIN_HOME:-$HOME/.local/bin}}" in script
        assert p.refused_hosts() == []
        assert p.needs_network() is None
        out = _https(d / SOCKET, d / CA_FILE, "astral.sh", "/uv/0.9.5/../../etc/passwd")
        assert out.startswith(b"HTTP/1.1 404"), out
        assert b"is not in the installer table" in out
        out = _https(d / SOCKET, d / CA_FILE, "github.com", "/astral-sh/uv")
        assert out.startswith(b"HTTP/1.1 403"), out
        assert b"github.com:443 is not a package registry" in out
        assert p.refused_hosts() == ["astral.sh", "github.com"]
        assert "needs network access to astral.sh, github.com" in (p.needs_network() or "")
        assert "refused (404): https://astral.sh/uv/0.9.5/../../etc/passwd" in p.drain()
    # the CA can vouch only for the table's hosts, and the proxy never intercepts a registry
    cert = x509.load_pem_x509_certificate(ca)
    nc = cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert nc.critical
    assert [n.value for n in nc.value.permitted_subtrees] == ["astral.sh"]
    with pytest.raises(ValueError, match="not a host of the installer table"):
        authority(InstallerTable.default().hosts).context("pypi.org")


def test_operator_entries_parse_or_are_refused_naming_the_form():
    t = InstallerTable.parse(["https://get.example.org/tool/{version}/install.sh=my-tool:a,b"])
    (e,) = t.entries
    assert (e.host, e.project, e.binaries) == ("get.example.org", "my-tool", ("a", "b"))
    assert e.path.fullmatch("/tool/1.2.3/install.sh")["version"] == "1.2.3"
    assert e.path.fullmatch("/tool/install.sh") is None
    assert "MY_TOOL_INSTALL_DIR" in install_script(e, e.host, "1.2.3")
    for bad in ("http://x.org/i.sh=x", "https://x.org/i.sh", "https://x.org/i.sh=a b"):
        with pytest.raises(ValueError, match="installer"):
            InstallerTable.parse([bad])


def test_a_registry_is_never_an_installer_host(tmp_path: Path):
    table = InstallerTable.parse(["https://pypi.org/get-uv.sh=uv"])
    with pytest.raises(ValueError, match=r"pypi\.org: a registry cannot also be"):
        Proxy(tmp_path / "egress", os.getuid(), ALLOW, installers=table)
    assert not (tmp_path / "egress").exists()


@pytest.mark.parametrize(
    ("filename", "arch", "libc", "ok"),
    [
        ("uv-0.9.5-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "x86_64", "gnu", True),
        ("uv-0.9.5-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "x86_64", "musl", False),
        ("uv-0.9.5-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "aarch64", "gnu", False),
        ("uv-0.9.5-py3-none-musllinux_1_1_x86_64.whl", "x86_64", "musl", True),
        ("uv-0.9.5-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "aarch64", "gnu", True),
        ("uv-0.9.5-py3-none-macosx_10_12_x86_64.whl", "x86_64", "gnu", False),
        ("uv-0.9.5-py3-none-win_amd64.whl", "x86_64", "gnu", False),
    ],
)  # fmt: skip
def test_the_wheel_of_the_jails_platform_is_picked(filename: str, arch: str, libc: str, ok: bool):
    assert platform_ok(filename, arch, libc) is ok


# -- the real service: the vendor's one-liner in a jail, then uvx through the proxy -----------
STEP = """set -e
curl -LsSf https://astral.sh/uv/install.sh | sh
. "$HOME/.local/bin/env"
echo "UV=$(command -v uv) $(uv --version)"
echo "PYTEST=$(uvx -w pytest pytest --version 2>&1 | tail -1)"
UV_HTTP_RETRIES=0 uv python install 3.12.0 >/dev/null 2>&1 || echo "PYTHON_DOWNLOAD=failed"
exit 7
"""


def test_uv_installs_from_the_table_and_uvx_reaches_pypi_in_a_jail(
    net_sandbox: SandboxClient, reachable
):
    if not (reachable("pypi.org", 443) and reachable("files.pythonhosted.org", 443)):
        pytest.skip("PyPI cannot be reached from this host: uv's wheel and pytest come from it")
    spec = EnvSpec.model_validate({"network": True, "steps": [{"run": STEP}]})
    with pytest.raises(SandboxRequestError) as e:  # exit 7: the build log comes back
        net_sandbox.create_session({"environment": spec.model_dump()})
    log = e.value.detail["log"]
    assert "exited 7" in e.value.detail["provision_failed"], log
    assert "UV=/tmp/.local/bin/uv uv " in log, log  # HOME=/tmp in a jail
    assert "PYTEST=pytest " in log, log
    # uv's own Python downloads (github.com, its mirror): refused and named, nothing else was
    assert "PYTHON_DOWNLOAD=failed" in log, log
    refused = {ln.split(": ", 2)[2].split(" ", 1)[0] for ln in log.splitlines()
               if ln.startswith("## egress: refused")}  # fmt: skip
    assert "github.com:443" in refused, log
    assert refused <= {"github.com:443", "releases.astral.sh:443"}, log
