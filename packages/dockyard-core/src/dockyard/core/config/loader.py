"""Loading a config: YAML files with inheritance, ``${...}`` references, dotted overrides.

* **Inheritance.** A top-level ``defaults:`` key names one base file or a list of them (paths
  relative to the file that names them). Bases are merged in order, then the file itself on
  top: mappings merge key by key, everything else (lists included) is replaced. Where a
  discriminated union (``loss_fn``, ``grpo.adv_estimator``, ``data_plane.weight_transport``)
  changes its ``type``/``name``, the child's mapping replaces the base's wholesale, so the
  base's keys for the old variant do not leak into the new one.
* **References.** A string ``"${policy.max_total_sequence_length}"`` is replaced by the value
  at that path of the merged config (or the schema default there); ``"run-${grpo.seed}"`` interpolates it as text.
* **Overrides.** ``key.path=value`` strings (command line), applied after merging: the value is
  parsed as YAML, so ``32``, ``0.28``, ``true``, ``null``, ``[a, b]``, ``"quoted text"`` all work;
  ``~key.path`` deletes a key. Setting a union's tag (``loss_fn.type=cispo``) drops the other
  keys of that section that came from files.

Then the dict is validated into :class:`MasterConfig`; every problem is reported at once in a
:class:`ConfigError`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dockyard.core.config.errors import ConfigError, format_validation_error
from dockyard.core.config.introspect import tagged_union_paths
from dockyard.core.config.schema import MasterConfig

DEFAULTS_KEY = "defaults"
_REF = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")
_TAGGED = tagged_union_paths(MasterConfig)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError([f"config file not found: {path}"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"invalid YAML: {e}"], str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"top level must be a mapping, got {type(data).__name__}"], str(path))
    return data


def merge(
    base: Mapping[str, Any], child: Mapping[str, Any], _path: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Deep-merge ``child`` over ``base`` (see the module docstring for the rules)."""
    out = copy.deepcopy(dict(base))
    for key, value in child.items():
        path = (*_path, str(key))
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            tag = _TAGGED.get(path)
            if tag is not None and tag in value and old.get(tag, value[tag]) != value[tag]:
                out[key] = copy.deepcopy(value)
            else:
                out[key] = merge(old, value, path)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML file with its ``defaults:`` chain merged in (no validation)."""
    path = Path(path).resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise ConfigError([f"{DEFAULTS_KEY}: cycle in defaults: {chain}"], str(path))
    return resolve_defaults(_read_yaml(path), path.parent, (*_seen, path))


def resolve_defaults(
    data: Mapping[str, Any], base_dir: str | Path, _seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``data`` (a config mapping not read from a file, or one that was) with the files its
    ``defaults:`` key names, relative to ``base_dir``, merged under it (no validation)."""
    data = dict(data)
    bases = data.pop(DEFAULTS_KEY, None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
    source = str(_seen[-1]) if _seen else "<dict>"
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError([f"{DEFAULTS_KEY}: must be a file name or a list of file names"], source)
    merged: dict[str, Any] = {}
    for b in bases:
        merged = merge(merged, load_yaml(Path(base_dir) / b, _seen))
    return merge(merged, data)


def _split_override(item: str) -> tuple[list[str], Any, bool]:
    if item.startswith("~"):
        return item[1:].split("."), None, True
    if "=" not in item:
        raise ConfigError(
            [f"override {item!r} is not key.path=value (or ~key.path to delete)"], "<overrides>"
        )
    key, raw = item.split("=", 1)
    key = key.strip().removeprefix("+")
    if not key or any(not part for part in key.split(".")):
        raise ConfigError([f"override {item!r}: empty key"], "<overrides>")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(
            [f"override {item!r}: value is not valid YAML ({e})"], "<overrides>"
        ) from None
    return key.split("."), value, False


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` / ``~key.path`` overrides to a copy of ``data``."""
    out = copy.deepcopy(dict(data))
    for item in overrides:
        keys, value, delete = _split_override(item)
        node: dict[str, Any] = out
        for i, k in enumerate(keys[:-1]):
            nxt = node.get(k)
            if nxt is None:
                if delete:
                    break
                nxt = node[k] = {}
            if not isinstance(nxt, dict):
                where = ".".join(keys[: i + 1])
                raise ConfigError(
                    [f"override {item!r}: {where} is {type(nxt).__name__}, not a mapping"],
                    "<overrides>",
                )
            node = nxt
        else:
            last = keys[-1]
            if delete:
                node.pop(last, None)
                continue
            parent_path = tuple(keys[:-1])
            if _TAGGED.get(parent_path) == last and node.get(last, value) != value:
                node.clear()
            node[last] = value
    return out


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` in ``data``, else the schema default at that path."""
    for source in (data, MasterConfig().model_dump(mode="json")):
        node: Any = source
        for k in dotted.split("."):
            if not isinstance(node, Mapping) or k not in node:
                break
            node = node[k]
        else:
            return node
    raise KeyError(dotted)


def resolve_references(data: dict[str, Any]) -> dict[str, Any]:
    """Replace ``${a.b}`` references (see the module docstring); problems raise ConfigError."""
    problems: list[str] = []

    def sub(value: Any, where: str, depth: int = 0) -> Any:
        if isinstance(value, dict):
            return {k: sub(v, f"{where}.{k}" if where else str(k), depth) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v, f"{where}.{i}", depth) for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value
        if depth > 10:
            problems.append(f"{where}: reference chain too deep (a cycle?)")
            return value
        whole = _REF.fullmatch(value)
        try:
            if whole:
                return sub(_lookup(data, whole.group(1)), where, depth + 1)
            return _REF.sub(lambda m: str(sub(_lookup(data, m.group(1)), where, depth + 1)), value)
        except KeyError as e:
            problems.append(f"{where}: reference ${{{e.args[0]}}} points to no key")
            return value

    out = sub(data, "")
    if problems:
        raise ConfigError(problems, "<references>")
    return out


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> MasterConfig:
    """Validate a plain dict into :class:`MasterConfig`, raising :class:`ConfigError`."""
    try:
        return MasterConfig.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(format_validation_error(MasterConfig, e), source) from None


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> MasterConfig:
    """Load ``path`` (with its ``defaults:`` chain), apply ``overrides``, resolve references
    and validate. Raises :class:`ConfigError` listing every problem with its dotted path."""
    data = apply_overrides(load_yaml(path), overrides)
    data = resolve_references(data)
    return config_from_dict(data, str(path))
