"""The in-sandbox test runner (stdlib + pytest only; mounted read-only at /opt/dockyard).

    python -I /opt/dockyard/runner.py pytest <report_fd> [--pycache-prefix DIR] [--select N] <pytest args...>
    python -I /opt/dockyard/runner.py plain  <report_fd> <file.py::test_name ...>
    python -I /opt/dockyard/runner.py calls  <report_fd> <calls.json>
    python -I /opt/dockyard/runner.py split  <report_fd> <file.py::test_name ...>  (split.py)

Each mode writes JSON lines to ``report_fd`` (a pipe whose reader is the service, outside the
sandbox): per-test phase outcomes, per-call serialised return values, and an ``end`` record.
The service never reads the task's stdout to decide anything. A test that never reports (the
code called ``os._exit``, was killed, or the report was cut) is *missing*, which counts as failed.
"""

import os
import sys
from _json import encode_basestring_ascii as _q  # C: no `json` (and its `re`) at start-up

WORKSPACE = os.environ.get("DOCKYARD_WORKSPACE", "/workspace")
# On the service's interpreter, started with -I -S: no site processing, so no *.pth file of
# anyone runs; the toolchain's site-packages (read-only) are appended explicitly. On an image's
# interpreter (TestsSpec.python: -I without -S) its own site dirs are the environment, and the
# service's (another Python's) must stay out.
if sys.flags.no_site:
    sys.path.extend(p for p in os.environ.get("DOCKYARD_SITE", "").split(":") if p)
_out = None


def emit(rec: dict) -> None:
    # lazy: json (and its re) only when a pytest/calls record is written; plain mode starts without
    import json

    data = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
    os.write(_out, data)  # type: ignore[arg-type]  # one write per record: atomic below PIPE_BUF


def emit_test(nodeid: str, when: str, outcome: str) -> None:
    """``emit({"k": "test", ...})`` without importing json (the plain runner's hot path)."""
    rec = f'{{"k":"test","id":{_q(nodeid)},"when":"{when}","outcome":"{outcome}"}}\n'
    os.write(_out, rec.encode())  # type: ignore[arg-type]


def _print_exc() -> None:
    import traceback  # lazy: 30 ms, and only when something failed; the runner's start-up is timed

    traceback.print_exc()


def _load(path: str, name: str) -> object:
    """Execute the file ``path`` as a fresh module ``name`` (what spec_from_file_location +
    exec_module do, without importing importlib.util)."""
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    mod = type(sys)(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(code, mod.__dict__)
    return mod


def _plain(v, depth=0):
    """Return ``v`` as plain JSON data, or raise TypeError. Exact builtin types only: an object
    that merely claims equality (a custom ``__eq__``) is not a value."""
    if depth > 100:
        raise TypeError("value nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, str):
        return v
    if t is float:
        if v != v or v in (float("inf"), float("-inf")):
            return {"__float__": repr(v)}
        return v
    if t in (list, tuple):
        return [_plain(x, depth + 1) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError(f"dict key of type {type(k).__name__} is not serialisable")
            out[k] = _plain(x, depth + 1)
        return out
    raise TypeError(f"return value of type {t.__module__}.{t.__qualname__} is not plain data")


class _Reporter:
    """pytest plugin: one record per test phase, one at collection errors, one at the end."""

    def pytest_runtest_logreport(self, report):
        rec = {"k": "test", "id": report.nodeid, "when": report.when, "outcome": report.outcome}
        if hasattr(report, "wasxfail"):
            rec["xfail"] = True
        emit(rec)

    def pytest_collectreport(self, report):
        if report.failed:
            emit({"k": "collect_error", "id": report.nodeid})

    def pytest_sessionfinish(self, session, exitstatus):
        emit({"k": "end", "exit": int(exitstatus)})


def _selecting(ids: list[str]):
    """pytest plugin: run exactly the tests ``ids`` name, building only those items.

    pytest gets the ids' files, not the ids: given node ids it aborts the whole run when one
    of them matches nothing ("not found"), and it still builds every function of their modules
    and every parametrisation of their functions before dropping the rest — in a test file
    with hundreds of parametrised cases, most of a test phase. Here a function no id leads to
    is never built, a parametrised one only with its named cases (all of them if none of its
    cases is named, or its id has none), and the items left are those the ids name (an id that
    names a file, class or function selects everything under it). An id that names nothing is
    missing; the others run.
    """
    # lazy: pytest (on DOCKYARD_SITE) only in pytest mode; the other modes start without it
    import pytest

    ids_set = set(ids)
    whole = {i for i in ids if "[" not in i}  # a file, class or function: all under it
    wanted: set[str] = set()  # every node on the way to an id
    for i in ids:
        parts = i.split("[", 1)[0].split("::")
        wanted.update("::".join(parts[:k]) for k in range(1, len(parts) + 1))

    def under_whole(nodeid: str) -> bool:
        parts = nodeid.split("[", 1)[0].split("::")
        return any("::".join(parts[:k]) in whole for k in range(1, len(parts) + 1))

    class Selecting:
        @pytest.hookimpl(tryfirst=True)
        def pytest_pycollect_makeitem(self, collector, name, obj):
            node = f"{collector.nodeid}::{name}"
            if node in wanted or under_whole(node):
                return None  # collected as usual
            return []  # not on the way to any id: nothing to build

        @pytest.hookimpl(trylast=True)  # after every parametrize() call
        def pytest_generate_tests(self, metafunc):
            base = metafunc.definition.nodeid
            calls = metafunc._calls
            if not calls or under_whole(base):
                return
            keep = [
                c
                for c in calls
                if (f"{base}[{c.id}]" if getattr(c, "_idlist", True) else base) in ids_set
            ]
            if keep:
                calls[:] = keep

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, config, items):
            keep = [it for it in items if it.nodeid in ids_set or under_whole(it.nodeid)]
            if len(keep) != len(items):
                chosen = set(map(id, keep))
                config.hook.pytest_deselected(items=[it for it in items if id(it) not in chosen])
                items[:] = keep

    return Selecting()


def run_pytest(args: list[str]) -> int:
    # lazy: pytest (on DOCKYARD_SITE) only in pytest mode; the other modes start without it
    import pytest

    plugins: list[object] = [_Reporter()]
    while args[:1] in (["--pycache-prefix"], ["--select"]):
        opt, value, args = args[0], args[1], args[2:]
        if opt == "--pycache-prefix":
            # Bytecode is looked up there, never in the workspace's __pycache__ folders: the
            # service puts pytest's rewritten held-out test modules there (see pycache.py).
            sys.pycache_prefix = value
        elif int(value):  # --select N: the last N arguments are the node ids to run
            ids, args = args[-int(value) :], args[: -int(value)]
            plugins.append(_selecting(ids))
            args += list(dict.fromkeys(i.split("::", 1)[0] for i in ids))
    sys.path.insert(0, WORKSPACE)
    return int(pytest.main(args, plugins=plugins))


def run_plain(ids: list[str]) -> int:
    sys.path.insert(0, WORKSPACE)
    modules: dict[str, object] = {}
    failed = 0
    for nodeid in ids:
        path, _, name = nodeid.partition("::")
        if path not in modules:
            try:
                modules[path] = _load(os.path.join(WORKSPACE, path), f"_dy_test_{len(modules)}")
            except BaseException:
                _print_exc()
                modules[path] = None
        mod = modules[path]
        if mod is None:
            emit_test(nodeid, "setup", "failed")
            failed += 1
            continue
        emit_test(nodeid, "setup", "passed")
        try:
            getattr(mod, name)()
            outcome = "passed"
        except BaseException:
            _print_exc()
            outcome = "failed"
            failed += 1
        emit_test(nodeid, "call", outcome)
    os.write(_out, b'{"k":"end","exit":%d}\n' % (1 if failed else 0))  # type: ignore[arg-type]
    return 1 if failed else 0


def run_calls(spec_path: str) -> int:
    # lazy: only calls mode imports a module by name; the runner's start-up is timed
    import importlib

    # lazy: json (and its re) only in calls mode and for records; plain mode starts without
    import json

    with open(spec_path) as f:
        spec = json.load(f)
    sys.path.insert(0, WORKSPACE)
    try:
        fn = getattr(importlib.import_module(spec["module"]), spec["function"])
    except BaseException:
        _print_exc()
        emit({"k": "end", "exit": 2, "error": "import failed"})
        return 2
    for i, case in enumerate(spec["cases"]):
        try:
            value = _plain(fn(*case["args"], **case["kwargs"]))
            emit({"k": "case", "i": i, "ok": True, "value": value})
        except BaseException as e:
            emit({"k": "case", "i": i, "ok": False, "error": f"{type(e).__name__}: {e}"[:500]})
    emit({"k": "end", "exit": 0})
    return 0


def main() -> int:
    global _out
    mode, fd = sys.argv[1], int(sys.argv[2])
    _out = os.dup(fd)  # private, non-inheritable copy: child processes of the tests never get it
    os.close(fd)
    os.set_inheritable(_out, False)
    args = sys.argv[3:]
    # a provisioned environment's site dir (set by the service, read here: -I ignores PYTHONPATH;
    # here, not at import, because a zygote fork imported this module before the task existed)
    # before the toolchain's own site dirs: the environment's pinned packages (a SWE-bench spec's
    # Werkzeug==2.3.7) win over the service's installation, as in the task's own image
    env_site = [p for p in os.environ.get("DOCKYARD_ENV_SITE", "").split(":") if p]
    tool = [
        sys.path.index(p) for p in os.environ.get("DOCKYARD_SITE", "").split(":") if p in sys.path
    ]
    at = min(tool, default=len(sys.path))
    sys.path[at:at] = env_site
    if mode == "pytest":
        return run_pytest(args)
    if mode == "plain":
        return run_plain(args)
    if mode == "split":  # the code under test in a separate process: see split.py
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # read-only mount
        # lazy: split.py is found on the path entry just added, and only split mode needs it
        from split import run_split

        return run_split(args, emit_test, _out)  # type: ignore[arg-type]
    if mode == "calls":
        return run_calls(args[0])
    print(f"runner: unknown mode {mode!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main()
    if sys.argv[1] in ("plain", "split", "pytest"):
        # Skip interpreter teardown (tens of ms with pytest loaded): the report is complete,
        # and nothing the tests left behind (atexit hooks, threads) can change a verdict.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
