"""The SWE task builder: real bugs injected into real libraries, offline.

:mod:`~dockyard.envs.swe.builder.mutate` enumerates AST mutations;
:mod:`~dockyard.envs.swe.builder.runner` runs a library's tests in a local subprocess (building
only — scoring always goes through the sandbox); :mod:`~dockyard.envs.swe.builder.build` keeps
the mutations that break at least one test while the rest still pass, and writes manifests;
:mod:`~dockyard.envs.swe.builder.issue` writes each issue text from the failing tests' evidence;
:mod:`~dockyard.envs.swe.builder.report` publishes a set with its validation report. Rebuild
the shipped set with ``scripts/build_swe_tasks.sh`` (``python -m dockyard.envs.swe.builder
--help`` for one library).
"""

from dockyard.envs.swe.builder.mutate import Mutation, apply_mutation, enumerate_mutations

__all__ = ["Mutation", "apply_mutation", "enumerate_mutations"]
