"""Egress: jails reach only the package registries (and the installer table), through a proxy.

A jail that needs the network (a ``run`` step of an environment with ``network: true``, the apt
jail of ``debs.py``; verifier jails when the caller wires one) still gets its own network
namespace (loopback only, like every jail: bwrap ``--unshare-net``). Its only way out::

    jail netns                         | bind mount (ro)        | the service (root)
    pip/apt/curl/uv --proxy--> 127.0.0.1:3128 --forwarder--> /opt/egress/proxy.sock --> Proxy
                                                   allowlisted host:80/443, or the installer table

The modules, one idea each:

* ``allow``: the :class:`Allowlist` (host apt sources, PyPI, ``--registry``) and the addresses a
  registry may not resolve to (:func:`forbidden_address`);
* ``jailside``: the mount, the in-jail forwarder, the jail's variables (:func:`jail_env`);
* ``http1``: request heads and the one plain-HTTP request forwarded;
* ``proxy``: :class:`Proxy`, per build, bounded (connection cap, head and idle deadlines, one
  event loop), with :meth:`Proxy.refused_hosts` for a verifier's ``needs_network``;
* ``installers`` + ``wheels`` + ``tls``: the installer table (``https://astral.sh/uv/install.sh``
  answered with uv's wheel from PyPI), the wheels' binaries, the service's CA.

A build's proxy is started before its first jail and closed (server stopped, open connections
shut, the dir removed) when the build ends, whether it succeeded, failed or timed out.
"""

from dockyard.sandbox.egress.allow import (
    APT_SOURCES,
    PYPI,
    SPECIAL_NETS,
    Allowlist,
    apt_source_hosts,
    forbidden_address,
    non_public_registries,
    normalize_host,
    unnamed_mirrors_warning,
)
from dockyard.sandbox.egress.http1 import HEADER_CAP, Refused
from dockyard.sandbox.egress.installers import Installer, InstallerTable, install_script
from dockyard.sandbox.egress.jailside import (
    CA_BUNDLE,
    CA_FILE,
    FORWARDER,
    MOUNT,
    PORT,
    SOCKET,
    attach,
    jail_env,
    proxy_url,
    wrap_argv,
)
from dockyard.sandbox.egress.proxy import (
    BACKLOG,
    CONNECT_TIMEOUT_S,
    HEAD_DEADLINE_S,
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    PORTS,
    Proxy,
)

__all__ = [
    "APT_SOURCES", "BACKLOG", "CA_BUNDLE", "CA_FILE", "CONNECT_TIMEOUT_S", "FORWARDER",
    "HEADER_CAP", "HEAD_DEADLINE_S", "IDLE_TIMEOUT_S", "MAX_CONNECTIONS", "MOUNT", "PORT",
    "PORTS", "PYPI", "SOCKET", "SPECIAL_NETS", "Allowlist", "Installer", "InstallerTable",
    "Proxy", "Refused", "apt_source_hosts", "attach", "forbidden_address", "install_script", "jail_env",
    "non_public_registries", "normalize_host", "proxy_url", "unnamed_mirrors_warning", "wrap_argv",
]  # fmt: skip
