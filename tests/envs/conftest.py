"""Fixtures for the envs suite: one real sandbox service (bwrap isolation) for the session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from dockyard.sandbox.egress import non_public_registries
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.testing import layer_cache_dir


@pytest.fixture(scope="session")
def sandbox_service() -> Iterator[ServiceHandle]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=2) as svc:
        yield svc


@pytest.fixture(scope="session")
def sandbox_url(sandbox_service: ServiceHandle) -> str:
    return sandbox_service.url


@pytest.fixture(scope="session")
def layers_sandbox_url() -> Iterator[str]:
    """A service with --allow-network that builds layered images into the layer cache the
    suites share (``testing.layer_cache_dir``: each base root is built once per CI run)."""
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is not installed: apt-get install -y mmdebstrap")
    args = ["--allow-network", "--env-cache-dir", layer_cache_dir()]
    for host in non_public_registries():  # this host's mirrors: named, as an operator would
        args += ["--registry", host]
    with start_service(workers=4, extra_args=args) as svc:
        yield svc.url


@pytest.fixture
def arun():
    """``arun(env, coro)``: run ``coro`` in a fresh loop, closing the env's clients before it ends."""
    import asyncio

    def run(env, coro):
        async def main():
            try:
                return await coro
            finally:
                await env.aclose()

        return asyncio.run(main())

    return run
