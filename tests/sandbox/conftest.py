"""Fixtures for the sandbox suite: one real service (real bwrap, real cgroups) per module.

``sandbox_service`` starts ``dockyard-sandbox serve`` on a free loopback port with
:func:`dockyard.sandbox.launch.start_service`; ``sandbox`` is a sync client to it. Other
packages' tests can copy these two fixtures. ``repo_root`` is the one directory that service
takes server repositories from (``--repo-root``): tests that name a ``repo.path`` make it there.
``layers_sandbox`` builds layered images (``layers/``) into a cache shared by the suites.
``net_sandbox`` is a client of a second service (``net_service``), started with
``--allow-network`` (provisioning that reaches the package registries), shared by the session;
it names with ``--registry`` the registries this host resolves to a non-public address (a
mirror: the proxy refuses those unless the operator names them, ``egress.forbidden_address``).
``reachable(host, port)`` says whether this host can open a TCP connection there (a test that
needs a registry skips if not).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.egress import non_public_registries
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.testing import layer_cache_dir


def _need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")


@pytest.fixture(scope="module")
def repo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repos")
    os.chmod(root, 0o755)  # what is under it must be open to every user (SourcePolicy)
    return root


@pytest.fixture(scope="module")
def sandbox_service(repo_root: Path) -> Iterator[ServiceHandle]:
    _need_bwrap()
    with start_service(workers=2, repo_roots=[repo_root]) as svc:
        yield svc


@pytest.fixture(scope="module")
def sandbox(sandbox_service: ServiceHandle) -> Iterator[SandboxClient]:
    with sandbox_service.client() as c:
        yield c


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def reachable() -> Callable[[str, int], bool]:
    return _reachable


@pytest.fixture(scope="session")
def net_service() -> Iterator[ServiceHandle]:
    _need_bwrap()
    args = ["--allow-network"]
    for host in non_public_registries():  # this host's mirrors: named, as an operator would
        args += ["--registry", host]
    with start_service(workers=1, extra_args=args) as svc:
        yield svc


@pytest.fixture(scope="session")
def net_sandbox(net_service: ServiceHandle) -> Iterator[SandboxClient]:
    with net_service.client() as c:
        yield c


@pytest.fixture(scope="session")
def layers_sandbox() -> Iterator[ServiceHandle]:
    """A service with --allow-network building layered images into the shared layer cache
    (``testing.layer_cache_dir``: base roots are built once per CI run, for every suite)."""
    _need_bwrap()
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is not installed: apt-get install -y mmdebstrap")
    args = ["--allow-network", "--env-cache-dir", layer_cache_dir()]
    for host in non_public_registries():  # this host's mirrors: named, as an operator would
        args += ["--registry", host]
    with start_service(workers=2, extra_args=args) as svc:
        yield svc
