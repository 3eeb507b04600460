"""The sandbox fleet: dockyard-sandbox services that score what the policy wrote.

Either the runtime starts them (one :class:`SandboxHost` actor per service, placed on the
sandbox nodes; each runs ``dockyard-sandbox serve`` as a child process) or the config names
external ones (``env.<name>.sandbox_urls``), which the runtime only health-checks.

A service that stops answering is restarted on the *same port* (:meth:`SandboxFleet.heal`), so
environments keep their URLs; tasks that were running on it come back as ``infra_error`` and
are masked by the trainer, never scored.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import httpx

from dockyard.sandbox.launch import start_service
from dockyard.train.runtime.cluster import require_ray
from dockyard.train.runtime.placement import Fleet, FleetSpec


class SandboxHost:
    """Ray actor: one sandbox service process on this node (restartable on the same port)."""

    def __init__(
        self,
        workers: int = 2,
        port: int = 0,
        host: str = "127.0.0.1",
        repo_roots: list[str] | None = None,
        git_schemes: list[str] | None = None,
    ) -> None:
        self._start_service = start_service
        self._workers = workers
        self._host = host
        self._roots = list(repo_roots or [])
        self._schemes = list(git_schemes or [])
        self.handle = start_service(
            host=host, port=port, workers=workers, repo_roots=self._roots, git_schemes=self._schemes
        )
        self._port = int(self.handle.url.rsplit(":", 1)[1])

    def url(self) -> str:
        return self.handle.url

    def pid(self) -> int:
        return self.handle.pid

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.handle.url}/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def restart(self) -> str:
        """Start the service again on the same port (after it died); returns its URL."""
        self.handle.kill()
        self.handle.stop()  # already dead: unmounts what it left (tmpfs) and removes its dir
        self.handle = self._start_service(
            host=self._host,
            port=self._port,
            workers=self._workers,
            repo_roots=self._roots,
            git_schemes=self._schemes,
        )
        return self.handle.url

    def stop(self) -> None:
        self.handle.stop(timeout=10)

    def __del__(self) -> None:  # the child must not outlive its actor
        try:
            if self.handle.proc.poll() is None:
                os.kill(self.handle.pid, signal.SIGKILL)
            self.handle.stop()  # dead now: only its mounts and temp dir to remove
        except Exception:
            pass


class SandboxFleet:
    """Started sandbox services (``num_services`` > 0) or external ``urls``.

    Args:
        num_services: services to start (0 when ``urls`` are given).
        workers: executor workers per started service.
        urls: external service URLs (health-checked, not managed).
        cpus: CPUs reserved per started service (0: share the node; the service's own
            workers bound its load).
        repo_roots: directories the started services take server repositories from
            (``--repo-root``; ``repo_path`` / server ``repo_git`` in a dataset).
        git_schemes: URL schemes their ``repo.git`` may use (``--allow-git-scheme``).
        wait: wait here until the started services answer (else :attr:`urls` waits).
        strategy: the services' placement strategy (``cluster.placement.sandbox``; None: the
            default).
    """

    def __init__(
        self,
        num_services: int = 1,
        *,
        workers: int = 2,
        urls: list[str] | None = None,
        cpus: float = 0.0,
        wait: bool = True,
        repo_roots: list[str] | None = None,
        git_schemes: list[str] | None = None,
        strategy: str | None = None,
    ) -> None:
        self.external = list(urls or [])
        self.fleet: Fleet | None = None
        self.restarts = 0
        self._urls: list[str] | None = None
        if self.external:
            self._urls = list(self.external)
            return
        self.fleet = Fleet(
            FleetSpec("sandbox", size=num_services, cpus=cpus, strategy=strategy),
            SandboxHost,
            lambda i: (
                (),
                {"workers": workers, "repo_roots": repo_roots, "git_schemes": git_schemes},
            ),
        )
        self._pending = self.fleet.call("url")
        if wait:
            _ = self.urls

    def starting(self) -> list[Any]:
        """ObjectRefs answering once each started service is up (none: external services or
        already up), to wait on together with the other fleets' start."""
        return [] if self._urls is not None else list(self._pending)

    @property
    def urls(self) -> list[str]:
        """The services' URLs (waits for started services to answer, the first time)."""
        if self._urls is None:
            self._urls = list(require_ray().get(self._pending))
        return list(self._urls)

    def pids(self) -> list[int]:
        """Service process ids (started services only)."""
        if self.fleet is None:
            return []
        return require_ray().get(self.fleet.call("pid"))

    def heal(self) -> int:
        """Restart started services that stopped answering; returns how many were restarted."""
        if self.fleet is None:
            return 0
        ray = require_ray()
        n = 0
        for i, ok in enumerate(ray.get(self.fleet.call("healthy"))):
            if not ok:
                ray.get(self.fleet.actors[i].restart.remote())
                n += 1
        self.restarts += n
        return n

    def shutdown(self) -> None:
        if self.fleet is None:
            return
        ray = require_ray()
        with contextlib.suppress(Exception):
            ray.get(self.fleet.call("stop"), timeout=30)
        self.fleet.shutdown()
