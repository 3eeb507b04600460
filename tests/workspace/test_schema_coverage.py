"""Every configuration key is read: a key no code path reads would be accepted and ignored, and
the configuration docs promise that an option either works or fails.

The test walks every leaf of ``MasterConfig`` and looks, in the AST of ``packages/*/src``
outside the schema's own modules (``dockyard/core/config/``), for a read of that key *under
its parent*: ``policy.tokenizer.chat_template`` is read by ``….tokenizer.chat_template``,
``…["tokenizer"]["chat_template"]``, ``….tokenizer.get("chat_template")`` or
``getattr(….tokenizer, "chat_template")``. A bare ``.name`` or ``.enabled`` proves nothing, so
the parent is always required (for ``env.<name>.type``: ``env[<anything>].type``). Reads
through a local alias count (``g = cfg.policy.generation; g.top_p``; ``for e in
cfg.env.values(): e.type``), and so do reads through a parameter annotated with a schema class
(``def f(g: GenerationConfig): g.top_p``) or bound, by the callee's name, to what its call
sites pass (``PolicyLoss.from_config(cfg.loss_fn)`` reads ``loss_fn.type`` through
``loss_cfg.type``), and a dotted key passed to a call reads that key (``get_dotted(c,
"cluster.num_nodes")``: the k8s planner reads config dicts so). Methods of the schema classes (and functions of the
schema modules) count as code when something outside calls them (``loss_cfg.loss_options()``,
``cfg.env_for_data()``), transitively, with ``self`` standing for the class's place in the
tree; validators do not: checking a key is not using it.

Modules that only check keys (``CHECK_ONLY``: the pre-flight) do not count either. A key
that is deliberately unread goes in ``UNREAD`` with the reason; nothing else does.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

from dockyard.core.config import MasterConfig
from dockyard.core.config.introspect import is_model, iter_fields, strip, union_members

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "packages/dockyard-core/src/dockyard/core/config"
WILD = "*"  # a subscript or loop step whose key is not a constant (``env[name]``)

CHECK_ONLY = (REPO / "packages/dockyard-train/src/dockyard/train/preflight.py",)
"""Modules that only check keys (the pre-flight: files exist, extras installed): like the
schema's validators, checking a key there is not using it."""

UNREAD: dict[str, str] = {
    "policy.dtensor_cfg.enabled": "the schema makes it the complement of policy.jax_cfg.enabled "
    "(exactly one is true); the runtime picks the trainer by jax_cfg.enabled",
}
"""Field paths no code reads on purpose -> why."""

Path_ = tuple[str, ...]


# ------------------------------------------------------------------- the schema


def schema_leaves() -> list[Path_]:
    """Every field path of ``MasterConfig`` that is not itself a section (sections are read
    when their keys are); ``env.<name>.type`` has the step ``<name>``."""
    out = []
    for dotted, annotation, _ in iter_fields(MasterConfig):
        members = union_members(annotation)
        if any(is_model(m) for m in members) or any(_dict_of_models(m) for m in members):
            continue
        path = tuple(dotted.split("."))
        if path not in out:
            out.append(path)
    return out


def _dict_of_models(tp: object) -> bool:
    args = getattr(tp, "__args__", ())
    return getattr(tp, "__origin__", None) is dict and bool(args) and is_model(strip(args[-1]))


def class_paths() -> dict[str, list[Path_]]:
    """Schema class name (and its base classes') -> where it sits in the tree."""
    out: dict[str, list[Path_]] = {"MasterConfig": [()]}
    for dotted, annotation, _ in iter_fields(MasterConfig):
        path = tuple(dotted.split("."))
        for m in union_members(annotation):
            model = strip(m.__args__[-1]) if _dict_of_models(m) else m
            if not is_model(model):
                continue
            here = (*path, "<name>") if _dict_of_models(m) else path
            for cls in model.__mro__:
                if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
                    out.setdefault(cls.__name__, [])
                    if here not in out[cls.__name__]:
                        out[cls.__name__].append(here)
    for module in _schema_modules():  # union aliases: ``LossConfig``, ``WeightTransportConfig``
        for name, obj in vars(module).items():
            members = [m.__name__ for m in union_members(obj) if is_model(m)]
            if len(members) > 1 and name not in out:
                out[name] = sorted({p for m in members for p in out.get(m, [])})
    return out


def _schema_modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"dockyard.core.config.{p.stem}")
        for p in sorted(SCHEMA_DIR.glob("*.py"))
        if p.stem != "__init__"
    ]


# ------------------------------------------------------------------- the reads


@dataclass
class Reads:
    """Adjacent steps seen in read expressions: ``(parent, key)`` and
    ``(grandparent, key)`` across one ``WILD`` step (keys under a ``dict[str, Model]``)."""

    pairs: set[tuple[str, str]] = field(default_factory=set)
    wild: set[tuple[str, str]] = field(default_factory=set)

    def add(self, path: Path_) -> None:
        for a, b in itertools.pairwise(path):
            if a != WILD and b != WILD:
                self.pairs.add((a, b))
        for a, w, b in zip(path, path[1:], path[2:], strict=False):
            if w in (WILD, "<name>") and a != WILD and b != WILD:
                self.wild.add((a, b))

    def covers(self, leaf: Path_) -> bool:
        parent, key = leaf[-2], leaf[-1]
        if parent == "<name>":
            return (leaf[-3], key) in self.wild
        return (parent, key) in self.pairs


Calls = dict[tuple[str, str | int], set[Path_]]
"""``(callee name, parameter position or keyword)`` -> the paths passed there."""

_ACCESSORS = {"get", "pop", "setdefault"}
_TRANSPARENT = {"model_dump", "model_copy", "copy", "items", "values", "keys"}
_DOTTED = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+")


class _Scanner(ast.NodeVisitor):
    """Records the read paths of a module. ``scopes`` map local names to the paths they stand
    for (one per function, nested ones see outer ones); ``self.x = <path>`` in a class binds
    ``self.x`` for its methods; parameters are bound to their annotation's schema class and
    to what call sites (by the callee's name, from the previous round: ``params``) pass."""

    def __init__(self, reads: Reads, classes: dict[str, list[Path_]], params: Calls) -> None:
        self.reads, self.classes, self.params = reads, classes, params
        self.calls: Calls = {}
        self.scopes: list[dict[str, list[Path_]]] = [{}]
        self.attrs: list[dict[str, list[Path_]]] = [{}]  # ``self.x`` per class
        self.self_paths: list[Path_] | None = None

    # paths of an expression ------------------------------------------------
    def paths(self, node: ast.AST) -> list[Path_]:
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
            return [(node.id,)]
        if isinstance(node, ast.Attribute):
            if _is_self(node.value) and node.attr in self.attrs[-1]:
                return self.attrs[-1][node.attr]
            return [(*p, node.attr) for p in self.paths(node.value)]
        if isinstance(node, ast.Subscript):
            key = node.slice
            step = (
                key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else WILD
            )
            return [(*p, step) for p in self.paths(node.value)]
        if isinstance(node, ast.Call):
            return self._call_paths(node)
        if isinstance(node, ast.BoolOp):  # ``cfg.get("x") or {}``
            return self.paths(node.values[0])
        if isinstance(node, ast.IfExp):
            return self.paths(node.body) + self.paths(node.orelse)
        return []

    def _call_paths(self, node: ast.Call) -> list[Path_]:
        f, args = node.func, node.args
        first = args[0] if args else None
        const = first.value if isinstance(first, ast.Constant) else None
        if isinstance(f, ast.Attribute) and f.attr in _ACCESSORS and isinstance(const, str):
            return [(*p, const) for p in self.paths(f.value)]
        if isinstance(f, ast.Attribute) and f.attr in _TRANSPARENT:
            return self.paths(f.value)
        if isinstance(f, ast.Name) and f.id in ("getattr", "hasattr") and len(args) >= 2:
            key = args[1].value if isinstance(args[1], ast.Constant) else None
            if isinstance(key, str):
                return [(*p, key) for p in self.paths(args[0])]
        if isinstance(f, ast.Name) and f.id == "dict" and len(args) == 1:
            return self.paths(args[0])
        return []

    # reads, call sites, aliases --------------------------------------------
    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
            for p in self.paths(node):
                self.reads.add(p)
        if isinstance(node, ast.Call):
            self._record_call(node)
        super().generic_visit(node)

    def _record_call(self, node: ast.Call) -> None:
        f = node.func
        callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        sites: list[tuple[str | int, ast.expr]] = [*enumerate(node.args)]
        sites += [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
        for where, arg in sites:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if _DOTTED.fullmatch(arg.value):  # ``get_dotted(c, "cluster.num_nodes")``
                    self.reads.add(tuple(arg.value.split(".")))
            elif callee:
                self.calls.setdefault((callee, where), set()).update(self.paths(arg))

    def _bind(self, target: ast.AST, value: ast.AST | None, paths: list[Path_]) -> None:
        if isinstance(target, ast.Name) and paths:
            self.scopes[-1][target.id] = paths
        elif isinstance(target, ast.Attribute) and _is_self(target.value) and paths:
            self.attrs[-1][target.attr] = [*paths, ("self", target.attr)]
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):  # ``g, rs = a, b``
                self._bind(t, v, self.paths(v))
        elif isinstance(target, ast.Tuple) and target.elts:
            self._bind(target.elts[-1], None, paths)  # ``for name, e in x.items()``: e

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        for t in node.targets:
            self._bind(t, node.value, self.paths(node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        if node.value is not None:
            self._bind(node.target, node.value, self.paths(node.value))

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._bind(node.target, None, [(*p, WILD) for p in self.paths(node.iter)])
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.visit(node.iter)
        self._bind(node.target, None, [(*p, WILD) for p in self.paths(node.iter)])
        for cond in node.ifs:
            self.visit(cond)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in [*node.decorator_list, *node.bases]:
            self.visit(d)
        self.attrs.append({})
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.visit_function(stmt, owner=node.name)
            else:
                self.visit(stmt)
        self.attrs.pop()

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str = "") -> None:
        """``owner``: the class whose method this is ('' for a plain function)."""
        for d in node.decorator_list:
            self.visit(d)
        static = any(ast.unparse(d) == "staticmethod" for d in node.decorator_list)
        positional = [*node.args.posonlyargs, *node.args.args]
        if owner and not static and positional:
            this, positional = positional[0], positional[1:]
            self.scopes.append({this.arg: self.self_paths} if self.self_paths else {})
        else:
            self.scopes.append({})
        callee = owner if node.name == "__init__" else node.name
        named = [(i, a) for i, a in enumerate(positional)] + [
            (a.arg, a) for a in node.args.kwonlyargs
        ]
        for where, a in named:
            bound = {(a.arg,), *self.params.get((callee, a.arg), ())}
            if isinstance(where, int):
                bound |= self.params.get((callee, where), set())
            if a.annotation is not None:
                bound |= {p for n in _names(a.annotation) for p in self.classes.get(n, [])}
            if len(bound) > 1:
                self.scopes[-1][a.arg] = sorted(bound)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.visit_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_function(node)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comp(node.generators, [node.elt])

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._comp(node.generators, [node.elt])

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._comp(node.generators, [node.elt])

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comp(node.generators, [node.key, node.value])

    def _comp(self, generators: list[ast.comprehension], elts: list[ast.expr]) -> None:
        self.scopes.append({})
        for gen in generators:
            self.visit(gen)
        for e in elts:
            self.visit(e)
        self.scopes.pop()


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _names(annotation: ast.AST) -> Iterator[str]:
    """Class names in an annotation (``GenerationConfig | None``, ``"MasterConfig"``)."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            with contextlib.suppress(SyntaxError):
                yield from _names(ast.parse(node.value, mode="eval"))


# ------------------------------------------------------- schema code that counts


def _is_validator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("validator" in ast.unparse(d) for d in fn.decorator_list)


SchemaFns = dict[str, list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]]


def _schema_functions() -> SchemaFns:
    """Function name -> its definitions in the schema modules, with the owning class ('')."""
    out: SchemaFns = {}
    for path in sorted(SCHEMA_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            owner = node.name if isinstance(node, ast.ClassDef) else ""
            body = node.body if isinstance(node, ast.ClassDef) else [node]
            for fn in body:
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_validator(fn):
                    out.setdefault(fn.name, []).append((fn, owner))
    return out


def _called_names(trees: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add(node.name.rsplit(".", 1)[-1])
    return names


def code_files(repo: Path = REPO) -> list[Path]:
    """``packages/*/src`` but the schema's modules and :data:`CHECK_ONLY`."""
    return [
        p
        for p in sorted(repo.glob("packages/*/src/**/*.py"))
        if SCHEMA_DIR not in p.parents and p not in CHECK_ONLY
    ]


ROUNDS = 3  # call-site bindings reach this many calls deep


def scan(files: Iterable[Path]) -> Reads:
    """The reads of ``files`` plus those of the schema code they call."""
    classes = class_paths()
    reads = Reads()
    trees = [ast.parse(p.read_text(), filename=str(p)) for p in files]
    params: Calls = {}
    for _ in range(ROUNDS):
        calls: Calls = {}
        for tree in trees:
            s = _Scanner(reads, classes, params)
            s.visit(tree)
            for k, v in s.calls.items():
                calls.setdefault(k, set()).update(v)
        params = calls
    schema_fns = _schema_functions()
    pending, done = _called_names(trees) & set(schema_fns), set()
    while pending:
        name = pending.pop()
        done.add(name)
        for fn, owner in schema_fns[name]:
            s = _Scanner(reads, classes, {})
            s.self_paths = classes.get(owner, [(owner,)]) if owner else None
            s.visit_function(fn, owner)
            pending |= (_called_names([fn]) & set(schema_fns)) - done
    return reads


def unread_keys(reads: Reads) -> list[str]:
    return [".".join(p) for p in schema_leaves() if not reads.covers(p)]


# ------------------------------------------------------------------------ tests


def test_every_config_key_is_read() -> None:
    reads = scan(code_files())
    missing = [k for k in unread_keys(reads) if k not in UNREAD]
    assert not missing, (
        "these config keys are accepted but no code reads them (make them work, or refuse "
        "them in the schema):\n  " + "\n  ".join(missing)
    )


def test_allowlist_names_real_keys_with_reasons() -> None:
    known = {".".join(p) for p in schema_leaves()}
    assert all(k in known and why.strip() for k, why in UNREAD.items())


def _reads_of(source: str) -> Reads:
    reads, classes, params = Reads(), class_paths(), {}
    for _ in range(ROUNDS):
        s = _Scanner(reads, classes, params)
        s.visit(ast.parse(source))
        params = s.calls
    return reads


def test_the_parent_is_required() -> None:
    """``.enabled`` on anything does not read ``policy.lora.enabled``; the parent does, also
    through aliases, dict access, loops over ``env``, annotated parameters, parameters bound at
    a call site and dotted key strings."""
    assert not _reads_of("x.enabled; y['chat_template']").covers(("policy", "lora", "enabled"))
    r = _reads_of(
        "lora = cfg.policy.lora\nlora.enabled\n"
        "w = cfg['tokenizer']\nw.get('chat_template')\n"
        "for name, e in cfg.env.items():\n    e.timeout_s\n"
        "def f(g: GenerationConfig | None):\n    return g.top_p\n"
        "def h(x, *, sched):\n    return x.lr, sched.warmup_steps\n"
        "h(cfg.policy.optimizer, sched=cfg.policy.scheduler)\n"
        "get_dotted(c, 'cluster.num_nodes')\n"
    )
    assert r.covers(("policy", "lora", "enabled"))
    assert r.covers(("policy", "tokenizer", "chat_template"))
    assert r.covers(("env", "<name>", "timeout_s"))
    assert r.covers(("policy", "generation", "top_p"))
    assert r.covers(("policy", "optimizer", "lr"))
    assert r.covers(("policy", "scheduler", "warmup_steps"))
    assert r.covers(("cluster", "num_nodes"))
    assert not r.covers(("policy", "generation", "top_k"))
    assert not r.covers(("env", "<name>", "type"))
    assert not r.covers(("policy", "scheduler", "lr"))
