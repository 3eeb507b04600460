"""Fixtures for the envs suite: one real sandbox service (bwrap isolation) for the session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from dockyard.sandbox.launch import ServiceHandle, start_service


@pytest.fixture(scope="session")
def sandbox_service() -> Iterator[ServiceHandle]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=2) as svc:
        yield svc


@pytest.fixture(scope="session")
def sandbox_url(sandbox_service: ServiceHandle) -> str:
    return sandbox_service.url


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
