"""Start the service as a subprocess (tests, the Ray runtime, notebooks).

    from dockyard.sandbox.launch import start_service
    with start_service(workers=2) as svc:
        client = svc.client()
        client.run_task(...)

The service binds a free loopback port unless ``port`` is given; ``handle.url`` is its URL.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from dockyard.sandbox.client import AsyncSandboxClient, SandboxClient
from dockyard.sandbox.lifecycle import reclaim


class ServiceHandle:
    """A running service process: ``url``, ``token``, ``stop()`` (graceful), ``kill()``."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        token: str | None,
        tmp: tempfile.TemporaryDirectory[str],
        log_path: Path,
        work_dir: Path,
        env_cache_dir: Path | None = None,
        env_cache_tmp: tempfile.TemporaryDirectory[str] | None = None,
    ):
        self.work_dir = work_dir  # holds ws/ (workspaces), trusted/, cache/
        self.env_cache_dir = env_cache_dir  # provisioned environments and layered images
        self._env_cache_tmp = env_cache_tmp  # the launcher's own (removed with the service)
        self.proc = proc
        self.url = url
        self.token = token
        self._tmp = tmp
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kw: Any) -> SandboxClient:
        return SandboxClient(self.url, self.token, **kw)

    def async_client(self, **kw: Any) -> AsyncSandboxClient:
        return AsyncSandboxClient(self.url, self.token, **kw)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL after ``timeout``."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # what our exit would close anyway (--exit-with-stdin)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()
        return self.proc.returncode

    def _cleanup(self) -> None:
        """Reclaim what a killed service left (its cgroups, mounts and work dir, as its next
        start would: ``lifecycle.reclaim``; nothing after a clean stop, and nothing while
        another live service holds the work dir), then remove the temp dir."""
        try:
            reclaim(self.work_dir)
        except Exception as e:  # still remove what we can below
            print(f"dockyard-sandbox launch: reclaiming {self.work_dir}: {e!r}", file=sys.stderr)
        temps = [t for t in (self._tmp, self._env_cache_tmp) if t is not None]
        roots = [os.path.realpath(t.name) + "/" for t in temps]
        try:
            with open("/proc/self/mounts") as f:
                mounts = [line.split()[1] for line in f]
        except OSError:
            mounts = []
        for m in sorted(mounts, reverse=True):
            if any(m.startswith(r) for r in roots):
                subprocess.run(["umount", "-l", m], capture_output=True)
        for t in temps:
            t.cleanup()

    def kill(self) -> None:
        """SIGKILL the service (what a crash looks like to clients)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    def __enter__(self) -> ServiceHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_service(
    host: str = "127.0.0.1",
    port: int = 0,
    workers: int = 2,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    queue_size: int = 256,
    work_dir: str | os.PathLike[str] | None = None,
    repo_roots: Sequence[str | os.PathLike[str]] | None = None,
    git_schemes: Sequence[str] | None = None,
    extra_args: list[str] | None = None,
    start_timeout_s: float = 180.0,  # importing fastapi alone can take a minute on a loaded CI box
    generate_token: bool = False,
) -> ServiceHandle:
    """Start ``dockyard-sandbox serve`` in a subprocess and wait until it answers /healthz."""
    tmp = tempfile.TemporaryDirectory(prefix="dockyard-sandbox-launch-")  # 0700: work, token
    d = Path(tmp.name)
    work = Path(work_dir) if work_dir is not None else d / "work"
    if token is None and generate_token:
        token = secrets.token_urlsafe(32)
    args = [
        sys.executable,
        "-m",
        "dockyard.sandbox.cli",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--queue-size",
        str(queue_size),
        "--ready-file",
        str(d / "port"),
        "--work-dir",
        str(work),
    ]
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    for root in repo_roots or []:
        args += ["--repo-root", str(root)]
    for scheme in git_schemes or []:
        args += ["--allow-git-scheme", scheme]
    if token is not None:
        (d / "token").write_text(token)
        os.chmod(d / "token", 0o600)
        args += ["--token-file", str(d / "token")]
    args += extra_args or []
    named = [a for a in args if a == "--env-cache-dir" or a.startswith("--env-cache-dir=")]
    envs_tmp = None
    if named:
        i = args.index(named[0])
        envs = Path(args[i + 1] if named[0] == "--env-cache-dir" else named[0].split("=", 1)[1])
    else:
        # Not inside the 0700 dir above: layered images are built and mounted by the root of a
        # user namespace (an unprivileged host uid), which must traverse to the layer cache.
        envs_tmp = tempfile.TemporaryDirectory(prefix="dockyard-sandbox-envs-")
        os.chmod(envs_tmp.name, 0o711)
        envs = Path(envs_tmp.name)
        args += ["--env-cache-dir", str(envs)]
    log_path = d / "service.log"
    with open(log_path, "wb") as logf:
        # --exit-with-stdin: our end of its stdin pipe closes when this process exits, however
        # it exits (a SIGTERM or SIGKILL runs no __exit__), and the service then drains and
        # exits instead of living on, as root, with nobody to stop it
        proc = subprocess.Popen(
            [*args, "--exit-with-stdin"], stdout=logf, stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
        )  # fmt: skip
    deadline = time.monotonic() + start_timeout_s
    while not (d / "port").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
            out = log_path.read_text(errors="replace")
            tmp.cleanup()
            if envs_tmp is not None:
                envs_tmp.cleanup()
            raise RuntimeError(
                f"dockyard-sandbox did not start (exit {proc.returncode}):\n{out[-4000:]}"
            )
        time.sleep(0.05)
    bound = int((d / "port").read_text())
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}"
    httpx.get(f"{url}/healthz", timeout=10).raise_for_status()
    return ServiceHandle(proc, url, token, tmp, log_path, work, envs, envs_tmp)
