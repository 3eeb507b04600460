"""An engine host ends its actor when the engine inside is dead (so Ray reports it and the driver
replaces it), and only then."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from dockyard.train.runtime.hosts import _exit_if_engine_dead

class EngineDeadError(RuntimeError):  # the name vLLM's client raises once its core process died
    pass

_exit_if_engine_dead(ValueError("a bad request"))  # an ordinary error: the host carries on
print("survived an ordinary error", flush=True)
_exit_if_engine_dead(EngineDeadError("EngineCore encountered an issue"))
print("not reached", flush=True)
"""


def test_host_exits_on_a_dead_engine_only() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 70, proc.stderr
    assert "survived an ordinary error" in proc.stdout
    assert "not reached" not in proc.stdout
    assert "the generation engine died" in proc.stderr
