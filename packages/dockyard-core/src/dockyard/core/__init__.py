"""dockyard.core: config schema, interfaces, RL math, replay buffer, drivers and the Ray runtime.

Importing this package never imports torch, JAX, vLLM or Ray (a test holds it to that).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("dockyard-core")
except _metadata.PackageNotFoundError:  # pragma: no cover - source tree without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
