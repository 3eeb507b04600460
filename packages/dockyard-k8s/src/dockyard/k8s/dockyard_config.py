"""Read the dockyard config YAML the trainer uses, as a plain dict (no dockyard-core import).

Same rules as the trainer's loader (``dockyard.core.config.loader``; a test holds the two to
the same result on every example):

* ``defaults: parent.yaml`` (or a list of them), resolved relative to the file, is loaded first
  and the file's own keys are merged over it (mappings merge recursively; lists and scalars are
  replaced). Where a tagged section changes its tag (``loss_fn.type``, ``grpo.adv_estimator.name``,
  ``data_plane.weight_transport.type``), the child's mapping replaces the parent's wholesale;
* dotted overrides ``grpo.num_prompts_per_step=32`` (value parsed as YAML) and ``~key.path``
  (delete) are applied next; setting a tag drops the section's other keys;
* ``${a.b}`` references are resolved last.

The result is what the renderer puts into the ConfigMap: one self-contained file, so the pods
never need the parent files.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dockyard.k8s.errors import SpecError

TAGGED = {
    ("loss_fn",): "type",
    ("grpo", "adv_estimator"): "name",
    ("data_plane", "weight_transport"): "type",
}
"""Tagged unions of the config schema: path -> tag key."""
_REF = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")

SECTIONS = (
    "policy",
    "loss_fn",
    "grpo",
    "env",
    "data",
    "cluster",
    "logger",
    "checkpointing",
    "data_plane",
)


def deep_merge(
    base: Mapping[str, Any], over: Mapping[str, Any], _path: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings merge recursively (unless a tagged
    section changes its tag), anything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        path = (*_path, str(key))
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            tag = TAGGED.get(path)
            if tag is not None and tag in value and old.get(tag, value[tag]) != value[tag]:
                out[key] = copy.deepcopy(dict(value))
            else:
                out[key] = deep_merge(old, value, path)
        else:
            out[key] = copy.deepcopy(value)
    return out


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


def load_config_file(
    path: Path, field: str = "config", _seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """Load a dockyard config file with its ``defaults:`` chain resolved."""
    path = path.resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise SpecError(f"{field}.defaults", f"cycle in defaults: {chain}")
    data = load_yaml_mapping(path, field)
    return resolve_defaults(data, path.parent, field, (*_seen, path))


def resolve_defaults(
    data: Mapping[str, Any], base_dir: Path, field: str = "config", _seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """Merge the files named by ``data['defaults']`` (relative to ``base_dir``) under ``data``."""
    data = dict(data)
    parents = data.pop("defaults", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise SpecError(f"{field}.defaults", "must be a file name or a list of file names")
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = deep_merge(merged, load_config_file(base_dir / parent, f"{field}.defaults", _seen))
    return deep_merge(merged, data)


def apply_overrides(
    config: Mapping[str, Any], overrides: Sequence[str], field: str = "overrides"
) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a copy of ``config``."""
    out = copy.deepcopy(dict(config))
    for i, item in enumerate(overrides):
        where = f"{field}[{i}]"
        if item.startswith("~"):
            delete_dotted(out, item[1:])
            continue
        key, sep, raw = item.partition("=")
        key = key.strip().removeprefix("+")
        if not sep or not key or any(not part for part in key.split(".")):
            raise SpecError(where, f"expected 'dotted.key=value' or '~dotted.key', got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise SpecError(where, f"value of {key} is not valid YAML: {e}") from e
        parts = key.split(".")
        parent = get_dotted(out, ".".join(parts[:-1])) if len(parts) > 1 else out
        is_tag = TAGGED.get(tuple(parts[:-1])) == parts[-1]
        if is_tag and isinstance(parent, dict) and parent.get(parts[-1], value) != value:
            parent.clear()  # a new variant of a tagged section: drop the old variant's keys
        set_dotted(out, key, value, where)
    return out


def delete_dotted(config: dict[str, Any], key: str) -> None:
    """``~a.b``: remove ``config["a"]["b"]`` if present."""
    parts = key.split(".")
    node: Any = config
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def resolve_references(config: dict[str, Any], field: str = "config") -> dict[str, Any]:
    """Replace ``"${a.b}"`` by the value at ``a.b``, and ``"x-${a.b}"`` by text interpolation."""

    def lookup(dotted: str, where: str) -> Any:
        missing = object()
        value = get_dotted(config, dotted, missing)
        if value is missing:
            raise SpecError(f"{field}.{where}", f"reference ${{{dotted}}} points to no key")
        return value

    def sub(value: Any, where: str, depth: int = 0) -> Any:
        if isinstance(value, dict):
            return {k: sub(v, f"{where}.{k}" if where else str(k), depth) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v, f"{where}.{i}", depth) for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value
        if depth > 10:
            raise SpecError(f"{field}.{where}", "reference chain too deep (a cycle?)")
        whole = _REF.fullmatch(value)
        if whole:
            return sub(lookup(whole.group(1), where), where, depth + 1)
        return _REF.sub(lambda m: str(sub(lookup(m.group(1), where), where, depth + 1)), value)

    return sub(config, "")


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


def get_dotted(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``get_dotted(c, "cluster.num_nodes")``; ``default`` when any part is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def check_sections(config: Mapping[str, Any], field: str = "config") -> None:
    """Top-level keys must be known sections (the trainer rejects others too)."""
    from dockyard.k8s.errors import nearest

    for key in config:
        if key not in SECTIONS:
            hint = nearest(str(key), SECTIONS)
            fix = f"did you mean '{hint}'?" if hint else f"valid sections: {', '.join(SECTIONS)}"
            raise SpecError(f"{field}.{key}", f"unknown config section; {fix}")
