"""From files to Kubernetes objects: load a recipe and an infra spec, resolve the dockyard
config, check the combination, render, write one YAML file per object.

    from dockyard.k8s import render_files, write_manifests
    objects = render_files("examples/k8s/recipes/grpo-math.yaml", "examples/k8s/infra/gke-a3.yaml")
    write_manifests(objects, "out/")

Every user error is a :class:`~dockyard.k8s.errors.SpecError` (or several, as SpecErrors)
whose message starts with the field at fault: ``recipe.ray.trainer.nodes: ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dockyard.core.config import loader
from dockyard.core.config.errors import ConfigError
from dockyard.envs import registry
from dockyard.k8s.errors import SpecError, SpecErrors, from_pydantic
from dockyard.k8s.infra import Infra
from dockyard.k8s.quantity import parse_quantity
from dockyard.k8s.recipe import Recipe
from dockyard.k8s.render.common import Context, FleetShape
from dockyard.k8s.render.policies import render_policies
from dockyard.k8s.render.ray import render_ray
from dockyard.k8s.render.sandbox import render_sandbox
from dockyard.k8s.validate import k8s_schema


def load_yaml_mapping(path: Path, field: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping; errors name ``field`` (where the path came from)."""
    if not path.is_file():
        raise SpecError(field, f"file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SpecError(field, f"{path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            field, f"{path} must hold a mapping at the top level, got {type(data).__name__}"
        )
    return data


def load_recipe(path: str | Path) -> Recipe:
    data = load_yaml_mapping(Path(path), "recipe")
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        raise from_pydantic("recipe", e, Recipe) from None


def load_infra(path: str | Path) -> Infra:
    data = load_yaml_mapping(Path(path), "infra")
    try:
        infra = Infra.model_validate(data)
    except ValidationError as e:
        raise from_pydantic("infra", e, Infra) from None
    check_infra_objects(infra)
    return infra


def check_infra_objects(infra: Infra) -> None:
    """Tolerations and affinity are Kubernetes objects: check them against the Kubernetes schemas
    now, so that an error names the infra field."""
    errors: list[SpecError] = []
    version = infra.kubernetes_version
    try:
        k8s_schema.resolve_version(version)
    except ValueError as e:
        raise SpecError("infra.kubernetes_version", str(e)) from None
    for name, pool in infra.pools.items():
        for i, tol in enumerate(pool.tolerations):
            for err in k8s_schema.validate_definition(
                tol,
                "io.k8s.api.core.v1.Toleration",
                version,
                f"infra.pools.{name}.tolerations[{i}]",
            ):
                errors.append(SpecError(err.path, err.message))
            if tol.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                field = f"infra.pools.{name}.tolerations[{i}].effect"
                errors.append(SpecError(field, "must be NoSchedule, PreferNoSchedule or NoExecute"))
        if pool.affinity is not None:
            for err in k8s_schema.validate_definition(
                pool.affinity,
                "io.k8s.api.core.v1.Affinity",
                version,
                f"infra.pools.{name}.affinity",
            ):
                errors.append(SpecError(err.path, err.message))
    scraper = infra.metrics_scraper
    if scraper is not None and not scraper.namespace_labels and not scraper.pod_labels:
        errors.append(
            SpecError(
                "infra.metrics_scraper",
                "set namespace_labels and/or pod_labels (empty would admit every pod)",
            )
        )
    if errors:
        raise SpecErrors(errors)


def get_dotted(config: dict[str, Any], key: str, default: Any = None) -> Any:
    """``get_dotted(c, "cluster.num_nodes")``; ``default`` when any part is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_dotted(config: dict[str, Any], key: str, value: Any, field: str) -> None:
    """``set_dotted(c, "a.b", 1)`` sets ``c["a"]["b"] = 1``, creating mappings on the way."""
    parts = key.split(".")
    node = config
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecError(
                field, f"{'.'.join(parts[: i + 1])} is a {type(child).__name__}, not a mapping"
            )
        node = child
    node[parts[-1]] = value


def spec_errors(err: ConfigError, field: str) -> SpecError | SpecErrors:
    """The trainer loader's problems (``"a.b: message"``) as errors naming ``field.a.b``."""
    errors = []
    for problem in err.problems:
        path, sep, message = str(problem).partition(": ")
        # a dotted key ("policy.model_name: ..."), not a file position ("/x.yaml:3:5: ...")
        if sep and path and " " not in path and "/" not in path and ":" not in path:
            errors.append(SpecError(f"{field}.{path}", message))
        else:
            errors.append(SpecError(field, str(problem)))
    return errors[0] if len(errors) == 1 else SpecErrors(errors)


def load_config(recipe: Recipe, recipe_dir: Path) -> dict[str, Any]:
    """The recipe's dockyard config as a plain mapping, read by the trainer's own loader
    (``dockyard.core.config.loader``): ``defaults:`` merged, then the recipe's overrides."""
    try:
        if isinstance(recipe.config, str):
            config = loader.load_yaml(recipe_dir / recipe.config)
        else:
            config = loader.resolve_defaults(recipe.config, recipe_dir)
    except ConfigError as e:
        raise spec_errors(e, "recipe.config") from None
    for i, item in enumerate(recipe.overrides):
        try:
            config = loader.apply_overrides(config, [item])
        except ConfigError as e:
            raise SpecError(f"recipe.overrides[{i}]", "; ".join(e.problems)) from None
    return config


def point_envs_at_sandbox(config: dict[str, Any], sandbox_url: str | None) -> None:
    """Check every ``env.<name>.type`` against the environment registry of dockyard-envs and,
    with a sandbox Service, set ``sandbox_urls`` of those that need one (the registry's
    ``needs_sandbox``, or an entry that lists ``sandbox_urls``)."""
    for name, env in (config.get("env") or {}).items():
        if not isinstance(env, dict):
            continue  # the schema check reports it
        try:
            sandboxed = registry.needs_sandbox(env.get("type") or name)
        except registry.UnknownNameError as e:
            raise SpecError(f"recipe.config.env.{name}.type", str(e)) from None
        if sandbox_url is not None and (sandboxed or "sandbox_urls" in env):
            env["sandbox_urls"] = [sandbox_url]
    dataset = get_dotted(config, "data.dataset_name")
    if isinstance(dataset, str) and dataset not in registry.dataset_names():
        known = ", ".join(registry.dataset_names())
        raise SpecError(
            "recipe.config.data.dataset_name", f"unknown dataset {dataset!r}; known: {known}"
        )


def resolve_config(
    recipe: Recipe, recipe_dir: Path, sandbox_url: str | None = None
) -> dict[str, Any]:
    """The dockyard config the pods get: defaults merged, overrides applied, then the
    deployment's own settings (each only where it applies):

    * ``cluster.address: auto`` (join the Ray cluster the pod runs in);
    * ``checkpointing.checkpoint_dir`` / ``logger.log_dir`` on the checkpoint volume
      (``<mount_path>/<name>/checkpoints`` and ``.../logs``) unless ``set_config_paths: false``;
    * ``env.<name>.sandbox_urls: [<the sandbox Service URL>]`` for every environment that needs
      the sandbox (see :func:`point_envs_at_sandbox`);

    then ``${...}`` references are resolved and the result is validated with the trainer's own
    schema (``MasterConfig``). The result is one self-contained mapping (no ``defaults:``), so
    the pods never need the parent files.
    """
    config = load_config(recipe, recipe_dir)
    set_dotted(config, "cluster.address", "auto", "recipe.config")
    if recipe.checkpoint.enabled and recipe.checkpoint.set_config_paths:
        base = f"{recipe.checkpoint.mount_path.rstrip('/')}/{recipe.name}"
        set_dotted(
            config, "checkpointing.checkpoint_dir", f"{base}/checkpoints", "recipe.checkpoint"
        )
        set_dotted(config, "logger.log_dir", f"{base}/logs", "recipe.checkpoint")
    point_envs_at_sandbox(config, sandbox_url)
    try:
        config = loader.resolve_references(config)
    except ConfigError as e:
        raise spec_errors(e, "recipe.config") from None
    _validate_with_core(config)
    return config


def _validate_with_core(config: dict[str, Any]) -> None:
    """The trainer's own validation (``MasterConfig``); problems name ``recipe.config.<key>``."""
    try:
        loader.config_from_dict(config, "recipe.config")
    except ConfigError as e:
        err = spec_errors(e, "recipe.config")
        raise (err if isinstance(err, SpecErrors) else SpecErrors([err])) from None


def _config_int(config: dict[str, Any], key: str, minimum: int) -> int | None:
    value = get_dotted(config, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"recipe.config.{key}", f"must be an integer >= {minimum}, got {value!r}")
    return value


def fleet_shape(recipe: Recipe, config: dict[str, Any]) -> FleetShape:
    """Pods and GPUs per fleet: from the recipe, else from the config's ``cluster`` section.

    ``recipe.ray.trainer.nodes + recipe.ray.inference.nodes`` must equal the config's
    ``cluster.num_nodes`` when the config sets it (the trainer plans its parallelism from it).
    """
    num_nodes = _config_int(config, "cluster.num_nodes", 1)
    gpus = _config_int(config, "cluster.gpus_per_node", 0)
    t, i = recipe.ray.trainer, recipe.ray.inference
    tn, inn = t.nodes, i.nodes
    if tn is None and inn is None:
        known = (
            f"config.cluster.num_nodes = {num_nodes}"
            if num_nodes
            else "the config sets no cluster.num_nodes"
        )
        raise SpecError(
            "recipe.ray.trainer.nodes", f"set it and recipe.ray.inference.nodes ({known})"
        )
    if num_nodes is not None:
        if tn is None:
            tn = num_nodes - (inn or 0)
            if tn < 1:
                raise SpecError(
                    "recipe.ray.inference.nodes",
                    f"leaves no trainer node of config.cluster.num_nodes = {num_nodes}",
                )
        if inn is None:
            inn = num_nodes - tn
            if inn < 1:
                raise SpecError(
                    "recipe.ray.trainer.nodes",
                    f"leaves no inference node of config.cluster.num_nodes = {num_nodes}",
                )
        if tn + inn != num_nodes:
            raise SpecError(
                "recipe.ray.trainer.nodes",
                f"trainer.nodes ({tn}) + inference.nodes ({inn}) = {tn + inn}, but the config's "
                f"cluster.num_nodes is {num_nodes}: make them agree",
            )
    if tn is None or inn is None:
        missing = "recipe.ray.trainer.nodes" if tn is None else "recipe.ray.inference.nodes"
        raise SpecError(
            missing, "not set, and the config has no cluster.num_nodes to derive it from"
        )
    shapes = []
    for role, group in (("trainer", t), ("inference", i)):
        g = group.gpus_per_node if group.gpus_per_node is not None else gpus
        if g is None:
            raise SpecError(
                f"recipe.ray.{role}.gpus_per_node",
                "not set, and the config has no cluster.gpus_per_node",
            )
        shapes.append(g)
    return FleetShape(
        trainer_nodes=tn, trainer_gpus=shapes[0], inference_nodes=inn, inference_gpus=shapes[1]
    )


def check_strict_spread(config: dict[str, Any], trainer_nodes: int) -> None:
    """``cluster.placement.trainer: STRICT_SPREAD`` puts each trainer rank on its own node of
    the trainer worker group (Ray custom resource ``fleet:trainer``): refuse a group with fewer
    pods than ``cluster.trainer_ranks`` here rather than leave the placement group pending."""
    ranks = _config_int(config, "cluster.trainer_ranks", 1)
    strict = get_dotted(config, "cluster.placement.trainer") == "STRICT_SPREAD"
    if strict and ranks and ranks > trainer_nodes:
        raise SpecError(
            "recipe.ray.trainer.nodes",
            f"{trainer_nodes} trainer node(s), but cluster.placement.trainer is "
            f"STRICT_SPREAD with cluster.trainer_ranks = {ranks} (one node per rank): add "
            "trainer nodes or choose SPREAD",
        )


def fit_trainer_ranks(config: dict[str, Any], shape: FleetShape) -> None:
    """One FSDP rank per trainer GPU: ``cluster.trainer_ranks`` is derived from the trainer
    fleet when the config leaves it out, and must agree with it when set. (Not for the JAX
    trainer: one process drives all of a node's devices; not for a CPU trainer fleet.)"""
    if shape.trainer_gpus <= 0 or get_dotted(config, "policy.jax_cfg.enabled") is True:
        return
    world = shape.trainer_nodes * shape.trainer_gpus
    ranks = get_dotted(config, "cluster.trainer_ranks")
    if ranks is None:
        set_dotted(config, "cluster.trainer_ranks", world, "recipe.ray.trainer")
        _validate_with_core(config)  # e.g. a multiple of tensor_parallel_size
    elif ranks != world:
        raise SpecError(
            "recipe.config.cluster.trainer_ranks",
            f"is {ranks}, but the trainer fleet has {world} GPUs (recipe.ray.trainer: "
            f"{shape.trainer_nodes} nodes x {shape.trainer_gpus} GPUs): set it to {world} (one "
            "FSDP rank per GPU), or leave it out to have it derived",
        )


def check_combination(ctx: Context) -> None:
    """Rules that span the recipe, the infra spec and the config."""
    transport = get_dotted(ctx.config, "data_plane.weight_transport.type")
    if transport == "shm":
        raise SpecError(
            "recipe.config.data_plane.weight_transport.type",
            "shm moves weights through one machine's /dev/shm, but on Kubernetes the trainer and "
            "inference fleets are separate pods: use collective or http",
        )
    cpus = get_dotted(ctx.config, "cluster.cpus_per_node")
    if isinstance(cpus, int):
        for role in ("trainer", "inference"):
            group = getattr(ctx.recipe.ray, role)
            if parse_quantity(group.cpu) < cpus:
                raise SpecError(
                    f"recipe.ray.{role}.cpu",
                    f"{group.cpu} is less than the config's cluster.cpus_per_node ({cpus})",
                )
    sandbox = ctx.recipe.sandbox
    if sandbox.enabled and not sandbox.token_secret:
        raise SpecError(
            "recipe.sandbox.token_secret",
            "required: dockyard-sandbox refuses to listen on a pod address without a token. Create a "
            "Secret with key 'token' (kubectl create secret generic NAME --from-literal=token=...) "
            "in the sandbox's and the Ray pods' namespaces, and name it here",
        )
    ck, vol = ctx.recipe.checkpoint, ctx.infra.storage.checkpoint
    ray_pods = 1 + ctx.shape.trainer_nodes + ctx.shape.inference_nodes
    if ck.enabled and vol.access_mode != "ReadWriteMany" and ray_pods > 1:
        raise SpecError(
            "infra.storage.checkpoint.access_mode",
            f"{vol.access_mode} volumes attach to one node, but {ray_pods} Ray pods mount the checkpoint "
            "volume: use ReadWriteMany storage (or recipe.checkpoint.enabled: false)",
        )
    if ctx.recipe.ray.mode == "raycluster" and ctx.recipe.ray.entrypoint:
        raise SpecError(
            "recipe.ray.entrypoint",
            "only used with mode: rayjob (submit jobs to a RayCluster yourself)",
        )


def build_context(recipe: Recipe, infra: Infra, recipe_dir: Path) -> Context:
    sandbox_url = None
    if recipe.sandbox.enabled:
        ns = recipe.sandbox.namespace or recipe.namespace
        sandbox_url = f"http://{recipe.name}-sandbox.{ns}.svc.cluster.local:{recipe.sandbox.port}"
    config = resolve_config(recipe, recipe_dir, sandbox_url)
    shape = fleet_shape(recipe, config)
    fit_trainer_ranks(config, shape)
    check_strict_spread(config, shape.trainer_nodes)
    ctx = Context(recipe=recipe, infra=infra, config=config, shape=shape)
    assert sandbox_url is None or sandbox_url == ctx.sandbox_url
    check_combination(ctx)
    return ctx


def render(ctx: Context) -> list[dict[str, Any]]:
    """All objects, in the order they should be applied."""
    sandbox = render_sandbox(ctx)
    ray = render_ray(ctx)
    workloads = sandbox + ray
    return render_policies(ctx, workloads) + workloads


def render_files(recipe_path: str | Path, infra_path: str | Path) -> list[dict[str, Any]]:
    recipe = load_recipe(recipe_path)
    infra = load_infra(infra_path)
    return render(build_context(recipe, infra, Path(recipe_path).resolve().parent))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the config in the ConfigMap) as literal blocks, readable in review."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def dump_object(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def manifest_name(index: int, obj: dict[str, Any]) -> str:
    return f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def write_manifests(objects: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """One YAML file per object, numbered in apply order (``kubectl apply -f DIR`` keeps it).
    Files this function wrote before (``NN-*.yaml``) are removed first."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("[0-9][0-9]-*.yaml"):
        old.unlink()
    paths = []
    for i, obj in enumerate(objects):
        path = out / manifest_name(i, obj)
        path.write_text(dump_object(obj))
        paths.append(path)
    return paths
