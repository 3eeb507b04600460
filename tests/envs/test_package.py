"""Package-level checks: no heavy frameworks imported, the registry, the docs' guide runs."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dockyard.envs.registry import env_names, make_env

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_importing_every_env_pulls_no_heavy_framework():
    code = (
        "import sys\n"
        "import dockyard.envs, dockyard.envs.math, dockyard.envs.code, dockyard.envs.swe, "
        "dockyard.envs.terminal, dockyard.envs.swe.builder.build, dockyard.envs.registry\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'jax', 'vllm', 'ray', 'sglang'})\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == ""


def test_registry():
    # a superset: an installed package may add its own (tests/envs/test_registry.py)
    assert {"code", "expression", "math", "mcq", "swe", "terminal"} <= set(env_names())
    env = make_env("math", verify_timeout_s=2)
    assert env.name == "math"
    with pytest.raises(KeyError, match="known: code, expression, "):
        make_env("chess")


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)


def test_write_your_own_guide_runs(sandbox_url, capsys):
    blocks = _python_blocks("write-your-own-environment.md")
    assert len(blocks) == 5
    ns: dict = {}
    exec(blocks[0], ns)  # the single-turn example
    exec(blocks[1], ns)  # the sandbox-backed class
    exec(blocks[2].replace("http://127.0.0.1:9090", sandbox_url), ns)
    exec(blocks[3], ns)  # tools
    exec(blocks[4], ns)  # the specs a package publishes
    assert ns["ENV"].needs_sandbox is False
    assert ns["DATASET"].target == "countdown_env.env:tasks"
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "{'reward/correct': 1.0, 'reward/format': 0.1}",
        "{'reward/tests': 1.0}",
        "False schema error: invalid arguments for 'add': b: 'x' is not of type 'integer'",
    ]
    assert asyncio.iscoroutinefunction(ns["FizzBuzz"].score)
