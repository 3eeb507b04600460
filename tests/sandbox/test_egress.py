"""Provisioning egress (``dockyard.sandbox.egress``): jails that build an environment with
``network: true`` reach the package registries only, through the build's allowlisting proxy.
Threat row 14: a step that reaches anywhere else fails, and the build log says why. The service
tests use the real bwrap sandbox and the real PyPI (skipped when it cannot be reached)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.egress import (
    MOUNT,
    SOCKET,
    SPECIAL_NETS,
    Allowlist,
    Proxy,
    apt_source_hosts,
    forbidden_address,
    non_public_registries,
    normalize_host,
    unnamed_mirrors_warning,
)
from dockyard.sandbox.envspec import EnvSpec


# -- unit: the allowlist ----------------------------------------------------------------------
def test_apt_sources_both_formats(tmp_path: Path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example.org/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://Mirror.Example.net/debian "
        "bookworm main\n"
        "deb-src http://src.example.net/debian bookworm main # trailing comment\n"
        "deb cdrom:[Debian 12]/ bookworm main\n"
        "deb file:/srv/local ./\n"
    )
    (d / "a.list").write_text("deb https://packages.example.com/apt stable main\n")
    (d / "off.list.disabled").write_text("deb https://disabled.example.com/apt stable main\n")
    (d / "b.sources").write_text(
        "Types: deb\n"
        "# http://snapshot.example.org/archive\n"
        "URIs: http://deb.example.org/debian\n"
        " https://second.example.org/debian\n"
        "Suites: bookworm\nComponents: main\n\n"
        "Types: deb\nEnabled: no\nURIs: http://off.example.org/debian\nSuites: x\n"
    )
    assert apt_source_hosts(tmp_path) == {
        "mirror.example.net", "src.example.net", "packages.example.com", "deb.example.org",
        "second.example.org",
    }  # fmt: skip
    allow = Allowlist.build(["Mirror.Internal."], apt_root=tmp_path)
    assert {"pypi.org", "files.pythonhosted.org", "mirror.internal"} <= allow.hosts
    assert allow.explicit == {"mirror.internal"}
    with pytest.raises(ValueError, match="--registry"):
        Allowlist.build(["evil.org:22/x"], apt_root=tmp_path)
    assert normalize_host("-o") is None


@pytest.mark.parametrize(
    ("addr", "bad"),
    [
        ("127.0.0.1", True), ("10.1.2.3", True), ("172.20.0.1", True), ("192.168.1.1", True),
        ("169.254.169.254", True), ("0.0.0.0", True), ("::1", True), ("::ffff:127.0.0.1", True),
        ("fd00::1", True), ("fe80::1%eth0", True), ("224.0.0.251", True), ("240.0.0.1", True),
        # issue 34 item 4: documentation (RFC 5737), benchmarking (RFC 2544), shared (RFC 6598)
        ("192.0.2.10", True), ("198.51.100.7", True), ("203.0.113.80", True),
        ("198.18.0.1", True), ("198.19.255.254", True), ("100.64.0.1", True),
        ("100.127.255.254", True), ("192.0.0.8", True),
        # NAT64, 6to4, Teredo, IPv4-compatible, IPv6 documentation, ORCHIDv2, discard
        ("64:ff9b::8.8.8.8", True), ("64:ff9b:1::1", True), ("2002:0808:0808::1", True),
        ("2001:0:4136:e378::1", True), ("::8.8.8.8", True), ("2001:db8::1", True),
        ("3fff::1", True), ("2001:20::1", True), ("100::1", True),
        # IPv4-mapped: judged by the address it carries
        ("::ffff:192.0.2.1", True), ("::ffff:10.0.0.1", True), ("::ffff:151.101.0.223", False),
        ("151.101.0.223", False), ("2a04:4e42::223", False), ("8.8.8.8", False),
        ("198.17.255.1", False), ("100.128.0.1", False), ("2001:4860:4860::8888", False),
    ],
)  # fmt: skip
def test_forbidden_addresses(addr: str, bad: bool):
    assert forbidden_address(addr) is bad


def test_registries_resolving_to_non_public_addresses_are_listed(tmp_path: Path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "deb http://localhost/debian bookworm main\n"
        "deb http://no-such-host.invalid/debian bookworm main\n"
    )
    found = non_public_registries(tmp_path)
    assert "localhost" in found  # loopback: to be named with --registry
    assert "no-such-host.invalid" not in found  # does not resolve: left out
    warning = unnamed_mirrors_warning([], tmp_path)  # what `serve --allow-network` prints
    assert warning is not None
    assert "--registry localhost" in warning
    assert unnamed_mirrors_warning(found, tmp_path) is None


def test_every_special_range_is_refused_at_both_ends():
    """Each net of the explicit list, its first and last address (not only ``is_global``)."""
    for net in SPECIAL_NETS:
        for ip in (net.network_address, net.broadcast_address):
            assert forbidden_address(str(ip)), (net, ip)


# -- unit: the proxy refuses, logs, cleans up ----------------------------------------------------
def _ask(path: Path, request: bytes, head_only: bool = False) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if head_only and b"\r\n\r\n" in out:
                break
        return out


def test_proxy_refuses_other_hosts_ports_and_private_addresses(tmp_path: Path):
    allow = Allowlist(frozenset({"localhost", "pypi.org", "trusted.local"}),
                      frozenset({"trusted.local"}))  # fmt: skip
    d = tmp_path / "egress"
    with Proxy(d, os.getuid(), allow) as p:
        sock = d / SOCKET
        st = os.stat(sock)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o755
        assert os.stat(d).st_uid == os.getuid()
        assert p.bind() == (str(d), MOUNT)
        cases = {
            b"CONNECT example.com:443 HTTP/1.1\r\n\r\n": b"not a package registry",
            b"CONNECT pypi.org:22 HTTP/1.1\r\n\r\n": b"only ports 80 and 443",
            b"CONNECT localhost:443 HTTP/1.1\r\n\r\n": b"non-public address",
            b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n": b"not a package registry",
            b"POST http://pypi.org/ HTTP/1.1\r\n\r\n": b"only CONNECT, GET, HEAD",
            b"GET /relative HTTP/1.1\r\n\r\n": b"only absolute http:// URLs",
            b"CONNECT --proxy=x HTTP/1.1\r\n\r\n": b"expected host:port",
        }
        for req, why in cases.items():
            out = _ask(sock, req)
            assert out.split(b"\r\n", 1)[0] in (
                b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 405 Method Not Allowed",
                b"HTTP/1.1 400 Bad Request",
            ), out  # fmt: skip
            assert why in out, out
        logged = p.drain()
        assert logged.count("## egress: refused") == len(cases)
        assert "example.com:443 is not a package registry" in logged
        assert p.drain() == ""
    assert not d.exists()  # closed: socket and dir gone
    # a host the operator named (--registry) may be private: past the check, to connect
    explicit = Allowlist(frozenset({"localhost"}), frozenset({"localhost"}))
    with Proxy(d, os.getuid(), explicit) as p:
        out = _ask(d / SOCKET, b"CONNECT localhost:443 HTTP/1.1\r\n\r\n", True)
        assert out.startswith((b"HTTP/1.1 200", b"HTTP/1.1 502")), out
        assert "non-public" not in p.drain()


# -- the real service: a registry is reachable, nothing else ------------------------------------
def _build_fails(c: SandboxClient, command: str) -> str:
    spec = EnvSpec.model_validate({"network": True, "steps": [{"run": command}]})
    with pytest.raises(SandboxRequestError) as e:
        c.create_session({"environment": spec.model_dump()})
    assert e.value.status == 422, e.value.detail
    assert "exited" in e.value.detail["provision_failed"]
    return e.value.detail["log"]


def test_pip_install_reaches_pypi_through_the_proxy(net_sandbox: SandboxClient, reachable):
    if not reachable("pypi.org", 443):
        pytest.skip("pypi.org cannot be reached from this host")
    spec = EnvSpec.model_validate({
        "network": True,
        "steps": [{"run": "pip install --no-deps --no-compile six==1.16.0 && env | grep -c _proxy="}],
    })  # fmt: skip
    sid = net_sandbox.create_session({"environment": spec.model_dump()})
    try:
        r = net_sandbox.exec(sid, "python -c 'import six; print(six.__version__, six.__file__)'")
        assert r.exit_code == 0, r
        assert r.stdout.startswith("1.16.0 /opt/env/site/"), r.stdout
    finally:
        net_sandbox.delete_session(sid)


def test_steps_reach_nothing_but_the_registries(net_sandbox: SandboxClient):
    log = _build_fails(
        net_sandbox,
        "python -c \"import urllib.request; urllib.request.urlopen('https://example.com', "
        'timeout=20)"',
    )
    assert "## egress: refused (403): example.com:443 is not a package registry" in log, log
    assert "Tunnel connection failed: 403" in log, log
    # no route at all past the proxy: the jail's own network namespace has only `lo`
    log = _build_fails(
        net_sandbox,
        "python -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=10)\"",
    )
    assert "Network is unreachable" in log, log


SMUGGLE = """
import socket
def ask(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(data)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out
first = b"HEAD http://deb.debian.org/debian/ HTTP/1.1\\r\\nHost: deb.debian.org\\r\\n\\r\\n"
second = b"GET http://deb.debian.org/smuggled HTTP/1.1\\r\\nHost: deb.debian.org\\r\\n\\r\\n"
out = ask(first + second)
print("PIPELINED", out.count(b"HTTP/1.1 "), out.split(b"\\r\\n", 1)[0].decode())
out = ask(b"GET http://deb.debian.org/debian/ HTTP/1.1\\r\\nHost: internal.example\\r\\n\\r\\n")
print("MISMATCH", out.split(b"\\r\\n", 1)[0].decode())
raise SystemExit(3)
"""


def test_plain_http_from_a_jail_is_one_request_with_its_own_host(
    net_sandbox: SandboxClient, reachable
):
    """Threat row 14 through a real jail: a pipelined second request is never answered, a Host
    header naming another site is a 400 (``test_egress_http.py`` checks what upstream gets)."""
    if not reachable("deb.debian.org", 80):
        pytest.skip("deb.debian.org cannot be reached from this host")
    log = _build_fails(net_sandbox, f"python - <<'EOF'\n{SMUGGLE}\nEOF")
    assert "PIPELINED 1 HTTP/1.1 " in log, log  # one response (any status), then closed
    assert "MISMATCH HTTP/1.1 400 Bad Request" in log, log
    assert "Host header 'internal.example' is not the request's deb.debian.org" in log, log
