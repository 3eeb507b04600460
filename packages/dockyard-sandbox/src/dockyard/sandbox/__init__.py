"""dockyard.sandbox: a hardened task executor service (bubblewrap jails) and its client.

Import the client from :mod:`dockyard.sandbox.client` and the wire models from
:mod:`dockyard.sandbox.models`; start a service for tests with
:func:`dockyard.sandbox.launch.start_service`. Nothing here imports torch, jax, vllm or ray.
"""

__version__ = "0.1.0"
