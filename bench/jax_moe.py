"""The JAX worker's Mixture-of-Experts layer (dockyard.jax.models.moe), forward + backward:
the grouped experts (32-row tiles of one expert, one GEMM each: the worker's path) against the
dense fallback and ``lax.ragged_dot``, the cost of the balancing
options (aux-loss-free bias, capacity, the router statistics and Switch loss) on top of grouped,
and — on fake CPU devices — the expert-parallel all-gather dispatch against one device.

Each row is the median of ``--repeats`` jitted ``value_and_grad`` calls after a warm-up
(compilation excluded), float32 on CPU. The paths agree (tests/jax/test_moe.py); this measures
speed only. Fake devices share the machine's cores, so the ``ep`` column shows what the
dispatch's collectives cost there, not a speed-up.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 .venv/bin/python bench/jax_moe.py
    .venv/bin/python bench/jax_moe.py --smoke     # one small row, one device
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dockyard.jax.models.moe import (
    RouterOptions,
    experts_dense,
    experts_grouped,
    experts_parallel,
    experts_ragged,
    route,
    router_stats,
)
from dockyard.jax.sharding import make_mesh

# (experts, top-k, tokens, hidden, expert width), as bench/moe_experts.py (the torch worker's)
CONFIGS = [(8, 2, 1024, 256, 128), (32, 4, 1024, 256, 128), (128, 8, 512, 256, 64)]


def _layer(variant: str, e: int, k: int, options: RouterOptions):
    """``value_and_grad`` of one layer; ``balancing`` and ``ep`` route with a bias and
    ``options.capacity_factor`` and add the Switch loss from the router statistics."""
    balancing = variant in ("balancing", "ep")

    def loss(params, x):
        wr, *w = params
        r = route(x @ wr, k, True, params_bias(e) if balancing else None,
                  options.capacity_factor if balancing else None)  # fmt: skip
        if variant == "dense":
            y = experts_dense(x, r.experts, r.gates, tuple(w), e)
        elif variant == "ragged_dot":
            y = experts_ragged(x, r.experts, r.gates, tuple(w), e)
        elif variant == "ep":
            y = experts_parallel(x, r.experts, r.gates, tuple(w), options)
        else:
            y = experts_grouped(x, r.experts, r.gates, tuple(w), e)
        out = jnp.mean(jnp.square(y))
        if balancing:
            out = out + 1e-3 * router_stats(r, e, None)[-1]
        return out

    return jax.jit(jax.value_and_grad(loss))


def params_bias(e: int) -> jax.Array:
    return jnp.linspace(-1e-2, 1e-2, e, dtype=jnp.float32)


def _time(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="one small row")
    args = ap.parse_args()
    configs = [(8, 2, 128, 64, 32)] if args.smoke else CONFIGS
    devices = jax.devices()
    ep = len(devices) if len(devices) > 1 else 0
    print(f"{len(devices)} device(s) ({devices[0].platform}); median of {args.repeats}, ms")
    head = "   E  k     N    H    I  dense  ragged_dot  grouped  +balancing"
    print(head + (f"  ep={ep} (all-gather)" if ep else ""))
    for e, k, n, h, i in configs:
        rng = np.random.default_rng(0)
        w = [rng.normal(size=s).astype(np.float32) * 0.05
             for s in ((h, e), (e, h, i), (e, h, i), (e, i, h))]  # fmt: skip
        x = rng.normal(size=(n, h)).astype(np.float32)
        one = RouterOptions(capacity_factor=1.25)
        row = {}
        for variant in ("dense", "ragged_dot", "grouped", "balancing"):
            fn = _layer(variant, e, k, one)
            row[variant] = _time(fn, (w, x), args.repeats)
        line = f"{e:4d} {k:2d} {n:5d} {h:4d} {i:4d} {row['dense'] * 1e3:6.1f}"
        line += f" {row['ragged_dot'] * 1e3:11.1f}"
        line += f" {row['grouped'] * 1e3:8.1f} {row['balancing'] * 1e3:11.1f}"
        if ep and e % ep == 0:
            mesh = make_mesh(ep, 1, devices)
            options = RouterOptions(capacity_factor=1.25, mesh=mesh)
            split = NamedSharding(mesh, P("fsdp"))
            placed = [jax.device_put(w[0], NamedSharding(mesh, P()))]
            placed += [jax.device_put(a, split) for a in w[1:]]
            t = _time(_layer("ep", e, k, options), (placed, jax.device_put(x, split)),
                      args.repeats)  # fmt: skip
            line += f" {t * 1e3:12.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
