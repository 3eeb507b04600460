"""An SGLang server started by the engine that uses it (``policy.generation.sglang_cfg``).

:class:`SGLangServer` runs ``python -m sglang.launch_server`` in a subprocess of the engine's
process (so it gets the GPUs the engine's Ray actor holds: ``CUDA_VISIBLE_DEVICES`` is inherited)
with SGLang's own flags:

=========================== ======================================================
``--model-path``            the model folder (the exported policy)
``--tp-size``               ``sglang_cfg.tensor_parallel_size``
``--mem-fraction-static``   ``sglang_cfg.mem_fraction_static``
``--context-length``        ``policy.max_total_sequence_length``
``--random-seed``           ``grpo.seed``
``--dtype``                 ``policy.precision``
``--host`` / ``--port``     where it listens (``127.0.0.1``, a free port)
=========================== ======================================================

:meth:`SGLangServer.start` waits until ``GET /health`` answers 200; a server that exits first
fails with the tail of its log. :meth:`SGLangServer.stop` ends its process group. Only the
command and the life cycle are tested here (against a fake ``sglang`` module): SGLang itself does
not install on these CPU machines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import httpx


class EngineDeadError(RuntimeError):
    """The SGLang server this engine started has exited (the name is what the application's
    engine actor looks for to replace a dead engine)."""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class SGLangServer:
    """Args:
    model: the model folder (or hub name) the server starts from.
    tensor_parallel_size: SGLang's ``--tp-size``.
    mem_fraction_static: ``--mem-fraction-static`` (None: SGLang's default).
    context_length, seed, dtype: ``--context-length``, ``--random-seed``, ``--dtype`` (None:
        SGLang's defaults).
    host, port: where it listens (port 0: a free one).
    launch_timeout_s: limit on becoming healthy (loading a model takes minutes).
    python: the interpreter that has SGLang (default: this one).
    extra_args: further ``launch_server`` flags, e.g. ``{"--device": "cpu"}``.
    """

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        mem_fraction_static: float | None = None,
        context_length: int | None = None,
        seed: int | None = None,
        dtype: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        launch_timeout_s: float = 900.0,
        python: str | None = None,
        extra_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.tensor_parallel_size = tensor_parallel_size
        self.mem_fraction_static = mem_fraction_static
        self.context_length = context_length
        self.seed = seed
        self.dtype = dtype
        self.host = host
        self.port = port or _free_port(host)
        self.launch_timeout_s = launch_timeout_s
        self.python = python or sys.executable
        self.extra_args = dict(extra_args or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(tempfile.gettempdir(), f"dockyard-sglang-{self.port}.log")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The ``launch_server`` command line (see the module docstring)."""
        flags: dict[str, Any] = {
            "--model-path": self.model,
            "--tp-size": self.tensor_parallel_size,
            "--mem-fraction-static": self.mem_fraction_static,
            "--context-length": self.context_length,
            "--random-seed": self.seed,
            "--dtype": self.dtype,
            "--host": self.host,
            "--port": self.port,
            **self.extra_args,
        }
        cmd = [self.python, "-m", "sglang.launch_server"]
        for flag, value in flags.items():
            if value is not None:
                cmd += [flag, str(value)]
        return cmd

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    async def start(self) -> None:
        """Start the server and wait until it is healthy (idempotent)."""
        if self.alive():
            return
        with open(self.log_path, "wb") as log:
            proc = self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + self.launch_timeout_s
        async with httpx.AsyncClient(base_url=self.url, timeout=5.0) as client:
            while True:
                if proc.poll() is not None:
                    raise EngineDeadError(
                        f"the SGLang server ({' '.join(self.command())}) exited with code "
                        f"{proc.returncode} before it was healthy; its log "
                        f"({self.log_path}) ends:\n{self.log_tail()}"
                    )
                try:
                    if (await client.get("/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"the SGLang server at {self.url} was not healthy within "
                        f"{self.launch_timeout_s:g} s; its log ({self.log_path}) ends:\n"
                        f"{self.log_tail()}"
                    )
                await asyncio.sleep(0.25)

    def stop(self, grace_s: float = 10.0) -> None:
        """End the server's process group (SIGTERM, then SIGKILL after ``grace_s``)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
