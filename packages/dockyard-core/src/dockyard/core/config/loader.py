"""Loading a config: YAML files with inheritance, ``${...}`` interpolation, Hydra-style overrides.

* **Files.** YAML, read with a safe loader that also refuses a key written twice in one mapping;
  every YAML error names ``file:LINE:COL``.
* **Inheritance.** A top-level ``defaults:`` key names one base file or a list of them (paths
  relative to the file that names them). Bases are merged in order, then the file itself on
  top: mappings merge key by key, everything else (lists included) is replaced. Where a
  discriminated union (``loss_fn``, ``grpo.adv_estimator``, ``data_plane.weight_transport``)
  changes its ``type``/``name``, the child's mapping replaces the base's wholesale, so the
  base's keys for the old variant do not leak into the new one. A missing base or a cycle is
  reported with the whole chain (``a.yaml -> b.yaml -> missing.yaml``).
* **``${config_dir:}``** is replaced, in each file before merging, by the absolute folder of
  the file it is written in: ``data: {train_path: "${config_dir:}/data/train.jsonl"}`` works
  from any working directory (for an inline mapping, the folder its ``defaults:`` are read from).
* **Interpolation** (OmegaConf's): ``"${policy.max_total_sequence_length}"`` takes the value at
  that path of the merged config, or the schema default there when no file sets it;
  ``"run-${grpo.seed}"`` interpolates it as text; ``"${oc.env:VAR,default}"`` reads an
  environment variable (``\\${...}`` is a literal ``${...}``).
* **Overrides** follow Hydra's override grammar (parsed by Hydra's own parser), applied after
  merging: ``key.path=value`` sets, ``+key.path=value`` adds a key the files do not set,
  ``++key.path=value`` adds or sets, ``~key.path`` deletes a key the files set
  (``~key.path=value`` only if it has that value). Values: ``32``, ``0.28``, ``true``, ``null``,
  ``[a,b]``, ``{a:1}``, ``${a.b}``; a quoted value (``key='8'``) stays a string; ``key=`` is the
  empty string. A mapping value merges into the mapping there, like a file. Setting a union's tag
  (``loss_fn.type=cispo``) drops the other keys of that section. Sweeps (``a=1,2``,
  ``choice(...)``, ``range(...)``, ``glob(...)``) and config groups (``key@pkg=...``) are
  refused: dockyard runs one config.

Then the dict is validated into :class:`MasterConfig`; every problem is reported at once in a
:class:`ConfigError`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf, grammar_parser
from omegaconf.errors import GrammarParseError, OmegaConfBaseException
from pydantic import ValidationError

from dockyard.core.config.errors import ConfigError, format_validation_error
from dockyard.core.config.introspect import tagged_union_paths
from dockyard.core.config.schema import MasterConfig

DEFAULTS_KEY = "defaults"
CONFIG_DIR = "${config_dir:}"
OVERRIDES = "<overrides>"
_TAGGED = tagged_union_paths(MasterConfig)
_PARSER = OverridesParser.create()
_SYNTAX = (
    "write key.path=value to set, +key.path=value to add, ++key.path=value to add or set, "
    "~key.path to delete"
)


def _config_dir_outside_a_file() -> str:
    raise ValueError(
        f"{CONFIG_DIR} means the folder of the YAML file it is written in, so it works only in "
        "a config file; write the path itself here"
    )


if not OmegaConf.has_resolver("config_dir"):
    OmegaConf.register_new_resolver("config_dir", _config_dir_outside_a_file)


# ---------------------------------------------------------------- files and inheritance


class _Loader(yaml.SafeLoader):
    """``yaml.safe_load`` that also refuses a key written twice in one mapping (each mapping is
    checked once, before ``<<:`` merge keys are flattened into it)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self.checked:
            self.checked.add(id(node))
            seen: dict[tuple[str, str], int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    problem = f"duplicate key {key[1]!r} (first set on line {seen[key] + 1})"
                    raise yaml.constructor.ConstructorError(
                        None, None, problem, key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line
        super().flatten_mapping(node)


def _yaml_problem(path: Path, e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return f"{path}: invalid YAML: {e}"
    message = str(getattr(e, "problem", None) or e)
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and context_mark is not None:
        message += f" ({context} at line {context_mark.line + 1})"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: {message}"


def _chain(files: Iterable[Path]) -> str:
    files = list(files)
    return " -> ".join(os.path.relpath(p, files[0].parent) for p in files)


def _read_yaml(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        reason = "not found" if isinstance(e, FileNotFoundError) else f"unreadable ({e.strerror})"
        if not seen:
            raise ConfigError([f"config file {reason}: {path}"], str(path)) from None
        problem = f"{DEFAULTS_KEY}: file {reason}: {path} (named in {seen[-1]}; chain: "
        raise ConfigError([f"{problem}{_chain((*seen, path))})"], str(seen[-1])) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader
    except yaml.YAMLError as e:
        raise ConfigError([_yaml_problem(path, e)], str(path)) from None
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
        source = str(_seen[-1])
        raise ConfigError([f"{DEFAULTS_KEY}: cycle in defaults: {_chain((*_seen, path))}"], source)
    return resolve_defaults(_read_yaml(path, _seen), path.parent, (*_seen, path))


def _with_config_dir(value: Any, folder: str) -> Any:
    if isinstance(value, dict):
        return {k: _with_config_dir(v, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_config_dir(v, folder) for v in value]
    if isinstance(value, str):
        return value.replace(CONFIG_DIR, folder)
    return value


def resolve_defaults(
    data: Mapping[str, Any], base_dir: str | Path, _seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``data`` (a config mapping not read from a file, or one that was) with the files its
    ``defaults:`` key names, relative to ``base_dir``, merged under it (no validation).
    ``${config_dir:}`` in ``data`` becomes ``base_dir``, made absolute."""
    own: dict[str, Any] = _with_config_dir(dict(data), str(Path(base_dir).resolve()))
    bases = own.pop(DEFAULTS_KEY, None)
    if bases is None:
        return own
    if isinstance(bases, str):
        bases = [bases]
    source = str(_seen[-1]) if _seen else "<dict>"
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError([f"{DEFAULTS_KEY}: must be a file name or a list of file names"], source)
    merged: dict[str, Any] = {}
    for b in bases:
        merged = merge(merged, load_yaml(Path(base_dir) / b, _seen))
    return merge(merged, own)


# ---------------------------------------------------------------- overrides


def _parse_error(text: str, e: OverrideParseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    lexer = "LexerNoViableAltException: "
    if lines[0].startswith(lexer) and len(lines) > 1 and "^" in lines[1]:
        at = lines[1].index("^") - len(lexer)  # Hydra draws a caret under the bad character
        reason = f"unexpected {text[at]!r} at position {at + 1}" if at < len(text) else "bad key"
    else:
        reason = "; ".join(
            line.strip() for line in lines if not line.startswith(("See https", "Error parsing"))
        )
    return (
        f"override {text!r} does not parse ({reason}); {_SYNTAX}; quote a value with spaces, "
        "commas or brackets: key='a, b'"
    )


def _sweep_problem(text: str, ov: Override) -> str:
    name = ov.value_type.name if ov.value_type else "sweep"
    kind = name.lower().replace("_", " ").removesuffix(" sweep")
    try:
        example = f"e.g. {ov.key_or_group}={next(ov.sweep_string_iterator())}"
    except Exception:  # glob and interval sweeps have no first value without Hydra's launcher
        example = f"{ov.key_or_group}=VALUE"
    return (
        f"override {text!r} is a Hydra sweep ({kind}), which runs several configs; dockyard runs "
        f"one: give one value ({example}), or quote text with a comma: key='a,b'"
    )


def _parse_override(text: str) -> Override:
    """One override parsed by Hydra's parser, refusing what dockyard cannot run."""
    if "=" not in text and not text.startswith("~"):
        raise ConfigError([f"override {text!r} is not key.path=value; {_SYNTAX}"], OVERRIDES)
    try:
        ov = _PARSER.parse_overrides([text])[0]
    except OverrideParseException as e:
        raise ConfigError([_parse_error(text, e)], OVERRIDES) from None
    problem = None
    if not ov.key_or_group:
        problem = f"override {text!r} has no key; {_SYNTAX}"
    elif ov.package is not None or "/" in ov.key_or_group:
        problem = (
            f"override {text!r} uses Hydra's config-group syntax ('group/option', 'key@package'); "
            "dockyard has no config groups: set keys by dotted path (a.b=value) or inherit a "
            f"file with {DEFAULTS_KEY}:"
        )
    elif ov.is_sweep_override():
        problem = _sweep_problem(text, ov)
    elif "shuffle(" in text.partition("=")[2]:
        problem = (
            f"override {text!r}: shuffle() gives a different order on every run; a run's config "
            "must be reproducible: write the list in the order you want"
        )
    if problem:
        raise ConfigError([problem], OVERRIDES)
    return ov


def _parent(data: dict[str, Any], keys: list[str], text: str) -> dict[str, Any] | None:
    """The mapping that holds ``keys[-1]``, or None where a mapping on the way is missing."""
    node: Any = data
    for i, k in enumerate(keys[:-1]):
        node = node.get(k)
        if node is None:
            return None
        if not isinstance(node, dict):
            where = ".".join(keys[: i + 1])
            fix = f"set the whole list: {where}=[...]" if isinstance(node, list) else f"set {where}"
            problem = f"override {text!r}: {where} is {type(node).__name__}, not a mapping; {fix}"
            raise ConfigError([problem], OVERRIDES)
    return node


def _delete(data: dict[str, Any], ov: Override, text: str) -> None:
    key = ov.key_or_group
    keys = key.split(".")
    parent = _parent(data, keys, text)
    if parent is None or keys[-1] not in parent:
        problem = (
            f"override {text!r}: {key} is not set in the config files, so there is nothing to "
            "delete (a key the files leave out takes its schema default); drop the override"
        )
        raise ConfigError([problem], OVERRIDES)
    current, wanted = parent[keys[-1]], ov.value()
    if ov.value_type is not None and current != wanted:
        problem = (
            f"override {text!r}: {key} is {current!r}, not {wanted!r}; write ~{key} to delete it "
            "whatever its value"
        )
        raise ConfigError([problem], OVERRIDES)
    del parent[keys[-1]]


def _apply_one(data: dict[str, Any], text: str) -> dict[str, Any]:
    ov = _parse_override(text)
    if ov.is_delete():
        _delete(data, ov, text)
        return data
    keys = ov.key_or_group.split(".")
    parent = _parent(data, keys, text)
    if ov.is_add() and parent is not None and keys[-1] in parent:
        problem = (
            f"override {text!r}: {ov.key_or_group} is already set ({parent[keys[-1]]!r}) in the "
            f"config files; write {text[1:]} to change it, or +{text} to add or set it"
        )
        raise ConfigError([problem], OVERRIDES)
    nested: Any = ov.value()
    for k in reversed(keys):
        nested = {k: nested}
    return merge(data, nested)


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply Hydra-grammar overrides (see the module docstring) to a copy of ``data``; every
    override that fails is reported at once, each naming its text."""
    out = copy.deepcopy(dict(data))
    problems: list[str] = []
    for text in overrides:
        try:
            out = _apply_one(out, text)
        except ConfigError as e:
            problems += e.problems
    if problems:
        raise ConfigError(problems, OVERRIDES)
    return out


# ---------------------------------------------------------------- interpolation


def _interpolations(
    value: Any, path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(path, text)`` of every string in ``value`` that holds ``${``."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _interpolations(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _interpolations(v, (*path, i))
    elif isinstance(value, str) and "${" in value:
        yield path, value


def _set_at(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        data = data[k]
    data[path[-1]] = value


def _resolve(cfg: DictConfig, path: tuple[Any, ...]) -> Any:
    node: Any = cfg
    for k in path:
        node = node[k]
    if isinstance(node, DictConfig | ListConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


def resolve_references(data: dict[str, Any]) -> dict[str, Any]:
    """Resolve ``${...}`` interpolations (see the module docstring) in a copy of ``data``,
    against ``data`` merged over the schema defaults; problems raise ConfigError."""
    problems: list[str] = []
    todo: list[tuple[tuple[Any, ...], str]] = []
    scratch = copy.deepcopy(data)
    for path, text in _interpolations(data):
        try:
            grammar_parser.parse(text)
            todo.append((path, text))
        except GrammarParseError as e:
            where = ".".join(map(str, path))
            problems.append(
                f"{where}: {text!r} is not a valid interpolation ({str(e).splitlines()[0]}); "
                r"write ${a.b} or ${oc.env:VAR,default}, or \${...} for the literal text"
            )
            _set_at(scratch, path, None)
    out = copy.deepcopy(data)
    if todo:
        full = merge(MasterConfig().model_dump(mode="json"), scratch)
        cfg = OmegaConf.create(full, flags={"allow_objects": True})
        for path, text in todo:
            try:
                _set_at(out, path, _resolve(cfg, path))
            except OmegaConfBaseException as e:
                where = ".".join(map(str, path))
                problems.append(f"{where}: cannot resolve {text!r}: {str(e).splitlines()[0]}")
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
    try:
        data = resolve_references(data)
    except ConfigError as e:
        raise ConfigError(e.problems, str(path)) from None
    return config_from_dict(data, str(path))
