"""The ``split`` runner: held-out test code in a trusted process, the code under test in another.

    python -I -S /opt/dockyard/runner.py split <report_fd> <file.py::test_name ...>

Why: in ``plain`` and ``pytest`` mode the code under test runs in the process that writes the
per-test report, so it could write a forged "passed" record and ``os._exit`` before the real
one. Here the process holding the report (the *judge*) never executes workspace code:

* the judge makes itself non-dumpable (``PR_SET_DUMPABLE 0``: a same-uid process can neither
  ptrace it nor open ``/proc/<judge>/fd`` or ``/mem``), then forks the *worker* before
  anything untrusted is imported; the worker closes the report fd at once;
* the judge's ``sys.path`` has no workspace entry; importing a workspace module (``from
  solution import *``) yields a :class:`RemoteModule` whose functions are calls into the worker
  over two pipes; arguments go as ``marshal`` data (judge -> worker), results come back as tagged
  JSON decoded into builtin types only (tuple, list, dict, set, str, int, float, bool, None,
  bytes): no object of the worker's can reach the judge, so ``__eq__`` tricks are impossible;
* exceptions in the worker come back as their builtin type (else ``RemoteError``) with the
  message; a dead worker fails every remaining test.

Only fixture-free ``test_*`` functions of held-out files (the service checks) are run, as in
``plain`` mode. Passing callables or objects of the test's own classes to the code under test
is not supported (the call fails: fail-closed).
"""

import builtins
import importlib
import marshal
import os
import sys
from _ctypes import FUNCFLAG_CDECL, CFuncPtr, _SimpleCData, dlopen
from _json import encode_basestring_ascii as _q
from _json import make_scanner
from importlib.machinery import ModuleSpec

WORKSPACE = os.environ.get("DOCKYARD_WORKSPACE", "/workspace")
MSG_CAP = 32 << 20


class RemoteError(Exception):
    """An exception raised by the code under test (not a builtin type)."""


# -- wire: two pipes, 4-byte length + payload (no socket/json/ctypes imports: start-up cost) --


def _send(fd: int, data: bytes) -> None:
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def _recv(fd: int) -> bytes:
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError("the other side closed the connection")
            buf += chunk
        return bytes(buf)

    n = int.from_bytes(exact(4), "big")
    if n > MSG_CAP:
        raise RemoteError(f"reply of {n} bytes exceeds the cap")
    return exact(n)


class _Strict:
    """Context for the C JSON scanner: no NaN/Infinity constants, no hooks."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict = {}  # noqa: RUF012 - the scanner reads it as an attribute

    @staticmethod
    def parse_constant(name: str):
        raise ValueError(f"JSON constant {name} is not allowed")


_scan = make_scanner(_Strict())


def loads(text: str):
    try:
        obj, end = _scan(text, 0)
    except (StopIteration, ValueError, RecursionError):
        raise RemoteError("malformed reply from the code under test") from None
    finally:
        _Strict.memo.clear()
    if end != len(text):
        raise RemoteError("malformed reply from the code under test")
    return obj


def dumps(v) -> str:
    """JSON text of :func:`encode`'s output (exact builtin types only)."""
    if v is None:
        return "null"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return repr(v)
    if t is str:
        return _q(v)
    if t is list:
        return "[" + ",".join(dumps(x) for x in v) + "]"
    return "{" + ",".join(_q(k) + ":" + dumps(x) for k, x in v.items()) + "}"


# -- tagged JSON (worker -> judge) ------------------------------------------------------------


def encode(v, depth=0):
    """Exact builtin types only (subclasses are refused), as tagged JSON data."""
    if depth > 100:
        raise TypeError("value nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, str):
        return v
    if t is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else {"f": repr(v)}
    if t is list:
        return [encode(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [encode(x, depth + 1) for x in v]}
    if t in (set, frozenset):
        return {"s" if t is set else "fs": [encode(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    if t is bytes:
        return {"b": list(v)}
    raise TypeError(f"value of type {t.__module__}.{t.__qualname__} is not plain data")


def decode(v, depth=0):
    """Inverse of :func:`encode` for untrusted input: builtins out, anything else raises."""
    if depth > 100:
        raise RemoteError("reply nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, str, float):
        return v
    if t is list:
        return [decode(x, depth + 1) for x in v]
    if t is dict and len(v) == 1:
        ((tag, x),) = v.items()
        if tag == "t" and type(x) is list:
            return tuple(decode(e, depth + 1) for e in x)
        if tag in ("s", "fs") and type(x) is list:
            items = [decode(e, depth + 1) for e in x]
            return set(items) if tag == "s" else frozenset(items)
        if tag == "d" and type(x) is list:
            return {decode(k, depth + 1): decode(e, depth + 1) for k, e in x}
        if tag == "f" and x in ("nan", "inf", "-inf"):
            return float(x)
        if tag == "b" and type(x) is list:
            return bytes(x)
    raise RemoteError("malformed reply from the code under test")


# -- worker (untrusted side) ------------------------------------------------------------------


def worker(rfd: int, wfd: int) -> None:
    sys.path.insert(0, WORKSPACE)
    while True:
        try:
            req = marshal.loads(_recv(rfd))  # from the judge: trusted
        except EOFError:
            os._exit(0)
        try:
            mod = importlib.import_module(req["module"])
            if req["op"] == "names":
                names = getattr(mod, "__all__", None)
                public = [n for n in vars(mod) if not n.startswith("_")]
                out = []
                for n in public if names is None else list(names):
                    v = getattr(mod, n)
                    if callable(v):
                        out.append([n, "call", None])
                    else:
                        try:
                            out.append([n, "value", encode(v)])
                        except TypeError:  # modules, instances: not importable by the judge
                            continue
                reply = {"ok": out, "all": names is not None}
            else:
                fn = getattr(mod, req["name"])
                reply = {"ok": encode(fn(*req["args"], **req["kwargs"]))}
        except BaseException as e:
            reply = {"err": type(e).__name__, "msg": str(e)[:2000]}
        try:
            text = dumps(reply)
        except (ValueError, RecursionError) as e:  # e.g. an int too long to print
            text = dumps({"err": "ValueError", "msg": f"reply cannot be sent: {e}"[:2000]})
        _send(wfd, text.encode())


# -- judge (trusted side) ---------------------------------------------------------------------


class Link:
    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd
        self.dead = False

    def ask(self, req: dict):
        try:
            data = marshal.dumps(req)
        except ValueError as e:
            raise TypeError(f"argument cannot be sent to the code under test: {e}") from None
        if self.dead:
            raise RemoteError("the code under test is gone (worker died)")
        try:
            _send(self.wfd, data)
            raw = _recv(self.rfd)
        except (OSError, EOFError) as e:
            self.dead = True
            raise RemoteError(f"the code under test is gone: {e}") from None
        try:
            reply = loads(raw.decode("ascii"))
        except UnicodeDecodeError:
            raise RemoteError("malformed reply from the code under test") from None
        if type(reply) is not dict:
            raise RemoteError("malformed reply from the code under test")
        if "err" in reply:
            name, msg = str(reply.get("err")), str(reply.get("msg"))
            exc = getattr(builtins, name, None)
            if isinstance(exc, type) and issubclass(exc, Exception):
                raise exc(msg)
            raise RemoteError(f"{name}: {msg}")
        return decode(reply.get("ok"))


def _remote_function(link: Link, module: str, name: str):
    def call(*args, **kwargs):
        return link.ask(
            {"op": "call", "module": module, "name": name, "args": args, "kwargs": kwargs}
        )

    call.__name__ = call.__qualname__ = name
    return call


class RemoteFinder:
    """Meta-path finder: top-level workspace modules become RemoteModules in the judge."""

    def __init__(self, link: Link, trusted: set[str]):
        self.link = link
        self.trusted = trusted

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if fullname != top or fullname in self.trusted:
            return None
        base = os.path.join(WORKSPACE, top)
        if not (os.path.exists(base + ".py") or os.path.isdir(base)):
            return None
        return ModuleSpec(fullname, self)

    def create_module(self, spec):
        mod = type(sys)(spec.name)
        names = self.link.ask({"op": "names", "module": spec.name})
        public = []
        for entry in names:
            n, kind, value = entry
            if type(n) is not str:
                continue
            setattr(mod, n, _remote_function(self.link, spec.name, n) if kind == "call" else value)
            public.append(n)
        mod.__all__ = public
        return mod

    def exec_module(self, module):
        pass


def _prctl():
    """libc ``prctl`` through ``_ctypes`` (importing ``ctypes`` costs ~10 ms of start-up)."""

    class CInt(_SimpleCData):
        _type_ = "i"

    class Fn(CFuncPtr):
        _flags_ = FUNCFLAG_CDECL
        _restype_ = CInt

    class Libc:
        _handle = dlopen(None, os.RTLD_NOW)

    return Fn(("prctl", Libc()))


def run_split(ids: list[str], emit_test, report_fd: int) -> int:
    prctl = _prctl()
    # PR_SET_DUMPABLE 0, then PR_GET_DUMPABLE must say 0: else refuse (fail closed).
    if prctl(4, 0, 0, 0, 0) != 0 or prctl(3, 0, 0, 0, 0) != 0:
        print("split runner: cannot make the judge non-dumpable; refusing", file=sys.stderr)
        return 2
    j_read, w_write = os.pipe()
    w_read, j_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # worker: drop everything of the judge's before any workspace code runs
        for fd in (report_fd, j_read, j_write):
            os.close(fd)
        worker(w_read, w_write)
        os._exit(0)
    os.close(w_read)
    os.close(w_write)
    link = Link(j_read, j_write)
    files = {nodeid.partition("::")[0] for nodeid in ids}
    trusted = {os.path.splitext(os.path.basename(f))[0] for f in files}
    # Last: stdlib and site-packages win, so a workspace `math.py` can never stand in for them.
    sys.meta_path.append(RemoteFinder(link, trusted))
    modules: dict[str, object] = {}
    failed = 0
    for nodeid in ids:
        path, _, name = nodeid.partition("::")
        if path not in modules:
            try:
                modules[path] = _load_trusted(os.path.join(WORKSPACE, path), len(modules))
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
            outcome, failed = "failed", failed + 1
        emit_test(nodeid, "call", outcome)
    os.close(j_write)
    os.write(report_fd, b'{"k":"end","exit":%d}\n' % (1 if failed else 0))
    return 1 if failed else 0


def _load_trusted(path: str, i: int) -> object:
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    mod = type(sys)(f"_dy_test_{i}")
    mod.__file__ = path
    sys.modules[mod.__name__] = mod
    exec(code, mod.__dict__)
    return mod


def _print_exc() -> None:
    import traceback  # lazy: 30 ms, and only when something failed; the runner's start-up is timed

    traceback.print_exc()
