"""The jail's side of egress: where the proxy's socket and CA are, the forwarder, the variables.

A jail that reaches the registries keeps its own network namespace (loopback only). Its one way
out is the proxy's unix socket, bind-mounted read-only at :data:`MOUNT` with the service's CA
files (:data:`CA_FILE`, :data:`CA_BUNDLE`). :data:`FORWARDER`, a few lines of socket relaying
run in the jail by its uid with the service's interpreter (``-I -S``), listens on
``127.0.0.1:``:data:`PORT` and relays each connection to the socket, then daemonises so the step
starts only once it listens (:func:`wrap_argv`); it dies with the jail's pid namespace. A step
may skip it and connect to the socket itself: that gains nothing, every cap, deadline and
refusal is the proxy's (``proxy.py``).

:func:`jail_env`: ``http_proxy``/``https_proxy`` (both cases) for pip, uv, apt and curl, and the
trust path of the installer table's TLS (``tls.py``): ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``, ``PIP_CERT``, ``GIT_SSL_CAINFO`` name the bundle (the host's public roots +
the service's CA; OpenSSL, curl, wget, pip, requests and uv read one of them),
``NODE_EXTRA_CA_CERTS`` the CA alone; ``no_proxy`` (both cases) the loopback names, so a test
talking to a server on the jail's own loopback (one the agent left running) reaches it directly.
"""

from __future__ import annotations

from typing import Any

MOUNT = "/opt/egress"  # under /opt: bwrap makes new parents 0700
SOCKET = "proxy.sock"
CA_FILE = "ca.pem"  # the service's CA certificate (no key: that never leaves the service)
CA_BUNDLE = "ca-bundle.pem"  # the host's public roots, then the CA
PORT = 3128  # inside the jail's own network namespace
LOCAL = "localhost,127.0.0.1,::1"  # never through the proxy: a server on the jail's own loopback

# Runs inside the jail: python -I -S -c FORWARDER PORT|fd:N SOCKET
FORWARDER = r"""
import os, socket, sys, threading
where, path = sys.argv[1], sys.argv[2]
if where.startswith("fd:"):  # bound already, by the caller (a port the kernel picked)
    srv = socket.socket(fileno=int(where[3:]))
else:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", int(where)))
srv.listen(64)
if os.fork():
    os._exit(0)
fd = os.open(os.devnull, os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
def pump(a, b, how):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(how)
    except OSError:
        pass
def serve(c):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        u.connect(path)
    except OSError:
        c.close()
        return
    # the proxy's end is final (nothing more is read); the client's only half-closes
    t = threading.Thread(target=pump, args=(u, c, socket.SHUT_RDWR), daemon=True)
    t.start()
    pump(c, u, socket.SHUT_WR)
    t.join()
    c.close()
    u.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def proxy_url() -> str:
    return f"http://127.0.0.1:{PORT}/"


def jail_env() -> dict[str, str]:
    """The proxy and CA variables of a jail that reaches the registries (module doc)."""
    url = proxy_url()
    bundle = f"{MOUNT}/{CA_BUNDLE}"
    trust = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO")
    return (
        dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"), url)
        | dict.fromkeys(("no_proxy", "NO_PROXY"), LOCAL)
        | dict.fromkeys(trust, bundle)
        | {"NODE_EXTRA_CA_CERTS": f"{MOUNT}/{CA_FILE}"}
    )


def wrap_argv(python: str, argv: list[str]) -> list[str]:
    """``argv`` run after the forwarder listens (exit 96 when it cannot start)."""
    script = (
        '"$1" -I -S -c "$2" "$3" "$4" </dev/null || '
        "{ echo 'egress: the registry forwarder did not start' >&2; exit 96; }; "
        'shift 4; exec "$@"'
    )
    return ["/bin/sh", "-c", script, "egress", python, FORWARDER, str(PORT),
            f"{MOUNT}/{SOCKET}", *argv]  # fmt: skip


def attach(spec: Any, proxy: Any, python: str) -> None:
    """A bwrap jail's ``spec`` (``jail.JailSpec``) reaching the registries through ``proxy``
    only: the proxy's dir bound read-only at :data:`MOUNT`, :func:`jail_env`, and the forwarder
    started (with ``python``, the service's interpreter) before the jail's command."""
    spec.ro_binds.append(proxy.bind())
    spec.env |= jail_env()
    spec.argv = wrap_argv(python, spec.argv)
