"""Gated DeltaNet in JAX: the chunked training form vs the token-by-token recurrence
(dockyard.jax.models.gated_delta), forward + backward, jitted.

Each row is one ``[B, T, H, d]`` problem (Qwen3-Next's head width 128 by default, 4 value
heads), timed as the median of ``--repeats`` calls after a compile-and-warm-up call; both
forms compute the same values (tests/jax/test_gated_delta.py), the column ``max |Δ|`` says how
far apart they are here.

    .venv/bin/python bench/gated_delta.py            # the table in docs/packages/jax.md
    .venv/bin/python bench/gated_delta.py --smoke    # one small row
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from dockyard.jax.models.gated_delta import gated_delta_chunked, gated_delta_recurrent

ROWS = [(1, 256), (1, 1024), (1, 4096), (4, 1024)]  # (batch, tokens)


def _inputs(B: int, T: int, H: int, d: int):
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, H, d)), jnp.float32) for _ in range(3))
    g = jnp.asarray(-np.exp(rng.normal(size=(B, T, H))) * 0.1, jnp.float32)
    beta = jnp.asarray(1 / (1 + np.exp(-rng.normal(size=(B, T, H)))), jnp.float32)
    return q, k, v, g, beta


def _timed(fn, args, repeats: int) -> tuple[float, jax.Array]:
    out = jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times), out[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    rows = ROWS[:1] if args.smoke else ROWS
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}, chunk {args.chunk}, "
          f"{args.heads} heads × {args.head_dim}")  # fmt: skip
    print("| B | T | chunked ms | recurrent ms | speed-up | max \\|Δ\\| |")
    print("|---|---|---|---|---|---|")
    for B, T in rows:
        inputs = _inputs(B, T, args.heads, args.head_dim)

        def fwd_bwd(form):
            def loss(*a):
                return jnp.sum(form(*a) ** 2)

            return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))

        chunked = fwd_bwd(partial(gated_delta_chunked, chunk_size=args.chunk))
        recurrent = fwd_bwd(gated_delta_recurrent)
        tc, _ = _timed(chunked, inputs, args.repeats)
        tr, _ = _timed(recurrent, inputs, args.repeats)
        got = np.asarray(jax.jit(partial(gated_delta_chunked, chunk_size=args.chunk))(*inputs))
        want = np.asarray(jax.jit(gated_delta_recurrent)(*inputs))
        diff = float(np.abs(got - want).max())
        print(f"| {B} | {T} | {tc * 1e3:.1f} | {tr * 1e3:.1f} | {tr / tc:.1f}× | {diff:.1e} |")


if __name__ == "__main__":
    main()
