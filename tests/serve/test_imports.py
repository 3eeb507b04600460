"""Importing dockyard.serve's engine registry and transports stays light (no torch/vllm/ray)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_light_imports() -> None:
    code = (
        "import sys, dockyard.serve, dockyard.serve.engines, dockyard.serve.transports, "
        "dockyard.serve.transports.shm, dockyard.serve.transports.http, dockyard.serve.engines.sglang; "
        "print(','.join(m for m in ('torch', 'vllm', 'ray', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == ""


def test_unknown_backend_is_named() -> None:
    from dockyard.serve.engines import engine_class

    with pytest.raises(ValueError, match=r"'tgi'.*sglang"):
        engine_class("tgi")
