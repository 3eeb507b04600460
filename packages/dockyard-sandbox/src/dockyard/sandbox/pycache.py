"""Assertion-rewritten bytecode of held-out test files, made once per file content.

pytest rewrites the ``assert`` statements of every test module it imports (parse, rewrite the
AST, compile): for a test file of a few hundred lines that is most of what importing it costs,
and a sandbox pays it in every test phase, since nothing in it may write bytecode that a later
task would read. Held-out test files are trusted and the same content comes back for every
sample of a task, so the service rewrites each content once, with pytest's own rewriter in its
own process (parsing and compiling, never executing), and puts the result in the task's
read-only mount (``/opt/dockyard-task/pycache``). The runner points ``sys.pycache_prefix``
there, so pytest finds it as its cached pyc: a checked-hash pyc whose hash must match the
source file pytest is importing, or it is ignored and the file rewritten as before.

With the prefix set, nothing under ``__pycache__/`` in the workspace is ever read: a pyc a
patch plants next to a held-out test file cannot stand in for it.

Only pytest's hash-checked pyc format (pytest 9) is written; with another pytest, or a config
that turns on ``enable_assertion_pass_hook`` (the rewrite depends on it), no pyc is made and
pytest rewrites in the sandbox, as it always did.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import importlib.util
import inspect
import io
import logging
import threading
from pathlib import Path

from dockyard.sandbox.toolchain import WORKSPACE

log = logging.getLogger("dockyard.sandbox")

PREFIX_DIR = "pycache"  # under the task mount: the runner's sys.pycache_prefix
CACHE_SIZE = 256  # distinct held-out file contents kept (a few hundred KB each at most)

_lock = threading.Lock()
_made: collections.OrderedDict[tuple[bytes, str], bytes | None] = collections.OrderedDict()


def _rewriter():
    """pytest's rewrite function, pyc tail and pyc writer, or None where they do not fit."""
    try:
        # lazy: pytest is the server extra's, not a dependency of dockyard-sandbox
        from _pytest.assertion.rewrite import PYC_TAIL, _write_pyc_fp, rewrite_asserts
    except ImportError:
        return None
    if list(inspect.signature(_write_pyc_fp).parameters)[:2] != ["fp", "source_hash"]:
        return None  # pytest 8: mtime-checked pycs, which a per-task file copy never matches
    return PYC_TAIL, _write_pyc_fp, rewrite_asserts


_REWRITER = _rewriter()


def supported() -> bool:
    return _REWRITER is not None


def rewritten_pyc(source: bytes, path: str) -> bytes | None:
    """The pyc pytest would cache for the test module at ``path`` (inside the sandbox) with
    content ``source``; None if it cannot be made (a syntax error is pytest's to report)."""
    if _REWRITER is None:
        return None
    key = (hashlib.sha256(source).digest(), path)
    with _lock:
        if key in _made:
            _made.move_to_end(key)
            return _made[key]
    _, write_pyc, rewrite = _REWRITER
    try:
        tree = ast.parse(source, filename=path)
        rewrite(tree, source, path, None)
        co = compile(tree, path, "exec", dont_inherit=True)
        buf = io.BytesIO()
        write_pyc(buf, importlib.util.source_hash(source), co)
        pyc: bytes | None = buf.getvalue()
    except (SyntaxError, ValueError):
        pyc = None
    except Exception:  # a pytest whose internals moved: the runner rewrites instead
        log.warning(
            "could not pre-rewrite %s; pytest rewrites it in the sandbox", path, exc_info=True
        )
        pyc = None
    with _lock:
        _made[key] = pyc
        while len(_made) > CACHE_SIZE:
            _made.popitem(last=False)
    return pyc


def write_held_out(ws: Path, rels: list[str], dest: Path, pytest_config: Path) -> int:
    """Write the rewritten pycs of the held-out ``rels`` (``.py`` files in ``ws``) under
    ``dest`` (the task mount's ``pycache`` folder), laid out the way ``sys.pycache_prefix``
    maps ``/workspace/<rel>``. Returns how many were written."""
    if _REWRITER is None or "enable_assertion_pass_hook" in pytest_config.read_text(
        errors="replace"
    ):
        return 0
    tail = _REWRITER[0]
    n = 0
    for rel in rels:
        if not rel.endswith(".py"):
            continue
        inside = f"{WORKSPACE}/{rel}"
        pyc = rewritten_pyc((ws / rel).read_bytes(), inside)
        if pyc is None:
            continue
        folder, _, name = inside.lstrip("/").rpartition("/")
        target = dest / folder / (name[:-3] + tail)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pyc)
        n += 1
    return n
