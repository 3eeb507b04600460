"""jax.sharding: with 4 fake CPU devices a 2×2 (fsdp, tensor) mesh trains exactly like 1 device.

The check runs in a subprocess (``_sharded_step.py``) because the device count is fixed when jax
is first imported: ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must precede it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dockyard.jax.sharding import make_mesh, param_spec

pytestmark = pytest.mark.slow


def test_sharded_step_equals_single_device(tiny_qwen2: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    script = Path(__file__).with_name("_sharded_step.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny_qwen2), str(tmp_path / "ckpt")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    r = json.loads(line.removeprefix("RESULT "))
    assert r["num_devices"] == 4
    # The parameters really are split: q_proj [64, 64] over fsdp (rows) and tensor (columns).
    assert r["q_proj_spec"] == ["fsdp", "tensor"]
    assert r["q_proj_shard_shape"] == [s // 2 for s in r["q_proj_shape"]]
    assert r["logprob_diff"] < 2e-5
    for step in r["steps"]:
        (l1, l4), (g1, g4), (lr1, lr4) = step["loss"], step["grad_norm"], step["lr"]
        assert l4 == pytest.approx(l1, rel=1e-5, abs=1e-6)
        assert g4 == pytest.approx(g1, rel=1e-5)
        assert lr4 == lr1
    assert r["weight_moved"] > 1e-4  # the comparison below is not vacuous
    assert r["weight_diff"] < 1e-5
    assert r["restored_extra"] == {"note": "2x2"}
    assert r["restored_step"] == 2
    assert r["restore_diff"] == 0.0
    a, b = r["after_restore_loss"]
    assert b == pytest.approx(a, rel=1e-5)


def test_param_spec_falls_back_when_not_divisible() -> None:
    """Specs drop an axis that does not divide the dimension (needs no fake devices)."""
    import jax

    mesh = make_mesh(1, 1, devices=jax.devices()[:1])
    spec = param_spec(("model", "layers", 0, "self_attn", "o_proj", "kernel"), (64, 64), mesh)
    assert tuple(spec) == (None, None)  # axis size 1: nothing to split


def test_mesh_errors_name_the_setting() -> None:
    import jax

    with pytest.raises(ValueError, match="tensor_parallel_size=3"):
        make_mesh(-1, 3, devices=jax.devices()[:1] * 2)
    with pytest.raises(ValueError, match="xla_force_host_platform_device_count"):
        make_mesh(4, 1, devices=jax.devices()[:1])
