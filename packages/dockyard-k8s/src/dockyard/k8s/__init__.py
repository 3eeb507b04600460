"""dockyard.k8s: render and validate Kubernetes (KubeRay) deployments offline; Slurm launcher.

Python API (the CLI, ``dockyard-k8s``, is a thin layer over it)::

    from dockyard.k8s import render_files, write_manifests, validate_objects
    objects = render_files("recipe.yaml", "infra.yaml")      # list of Kubernetes objects (dicts)
    report = validate_objects(objects, kubernetes_version="1.31")
    write_manifests(objects, "out/")

Depends on dockyard-core (the dockyard config is read and validated by the trainer's own
loader), dockyard-envs (its environment registry says which environments need the sandbox),
pydantic, pyyaml, jsonschema and kubernetes-validate: no torch, JAX, vLLM or Ray.
"""

from dockyard.k8s.build import (
    build_context,
    load_infra,
    load_recipe,
    render,
    render_files,
    resolve_config,
    write_manifests,
)
from dockyard.k8s.errors import SpecError, SpecErrors
from dockyard.k8s.validate import Report, validate_dir, validate_objects

__all__ = [
    "Report",
    "SpecError",
    "SpecErrors",
    "build_context",
    "load_infra",
    "load_recipe",
    "render",
    "render_files",
    "resolve_config",
    "validate_dir",
    "validate_objects",
    "write_manifests",
]
