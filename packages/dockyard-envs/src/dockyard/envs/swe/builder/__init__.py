"""The SWE task builder: real bugs injected into real libraries, offline.

:mod:`~dockyard.envs.swe.builder.mutate` enumerates AST mutations;
:mod:`~dockyard.envs.swe.builder.runner` runs a library's tests in a local subprocess (building
only — scoring always goes through the sandbox); :mod:`~dockyard.envs.swe.builder.build` keeps
the mutations that break at least one test while the rest still pass, and writes manifests.
Rebuild the shipped set with ``python -m dockyard.envs.swe.builder`` (see its ``--help``).
"""

from dockyard.envs.swe.builder.mutate import Mutation, apply_mutation, enumerate_mutations

__all__ = ["Mutation", "apply_mutation", "enumerate_mutations"]
