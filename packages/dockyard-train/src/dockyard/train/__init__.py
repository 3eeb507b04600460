"""dockyard-train: what runs. One driver per algorithm (:mod:`dockyard.train.algorithms`), the
Ray runtime that runs them (:mod:`dockyard.train.runtime`) and the ``dockyard`` command
(:mod:`dockyard.train.cli`). Importing this package imports none of torch, JAX, vLLM or Ray:
each command imports what it needs when it runs."""
