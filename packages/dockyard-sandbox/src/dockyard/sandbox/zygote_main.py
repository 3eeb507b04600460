"""The runner zygote: a pre-started interpreter that enters each bwrap jail by ``fork`` + ``setns``.

    python -I -S zygote_main.py <control fd> <site dirs>     (started by the service, as root)

A sandboxed test phase costs a fresh interpreter (and, in ``pytest`` mode, importing pytest)
on top of building the jail. This process pays for both once: it imports the in-sandbox
runner, ``split`` and pytest with its default plugins, then never runs anything else. For
each test phase the service builds the jail with bubblewrap as always (namespaces, mounts, the
read-only toolchain), keeps bwrap's process waiting at its ``--block-fd`` gate, and sends this
process the jail's namespace and root fds. Then:

* the zygote forks a *keeper* (``C``) and goes back to waiting; it never touches task data;
* ``C`` closes every fd but the task's, joins the task's cgroups, sets the task's rlimits,
  ``setns``-es into the jail's cgroup/ipc/uts/net/pid/mount namespaces, ``chroot``-s to the
  jail's root and forks the *task process* (``G``: pid 2 of the jail's pid namespace, next to
  bwrap's waiting process as pid 1; it dies with that namespace);
* ``G`` starts a new session, sets ``no_new_privs``, empties the capability bounding set, drops
  to the task's uid and gid with no groups (which clears every capability), takes the task's
  stdio and environment, reseeds ``random``, and runs the runner's ``main`` in-process;
* ``C`` waits for ``G`` and sends its wait status to the service, which then kills the jail.

The zygote is a fresh ``exec`` of the interpreter with an empty environment: nothing of the
service (its token) is in its memory, so nothing is in a task's. Its control socket is closed in
``C`` before anything else. Every task gets a pristine fork: no task ever runs in a process
another task touched. Differences from a fresh interpreter that a test could observe: the
string hash seed is shared by every task of one zygote, and ``sys.modules`` already holds the
runner, pytest and the stdlib modules they import.
"""

import array
import contextlib
import ctypes
import gc
import importlib
import json
import linecache
import os
import random
import resource
import shutil
import signal
import socket
import sys
import tempfile
import traceback

_NS = ("cgroup", "ipc", "uts", "net", "pid", "mnt")  # mnt last: it changes what paths mean
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_MAX_FDS = 16

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


CAP_LAST = _cap_last()


def _drop_privileges(uid: int) -> None:
    """What ``setpriv --reuid U --regid U --clear-groups --inh-caps=-all --bounding-set=-all
    --no-new-privs`` does, in-process."""
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(CAP_LAST + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from root to non-root without keep-caps: all caps cleared
    # capset(2): inheritable set empty too (v3 header, pid 0 = self; data all zero)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


def _task(req: dict, fds: dict[str, int]) -> None:
    """Runs in ``G``; never returns."""
    os.setsid()
    _drop_privileges(int(req["uid"]))
    os.umask(0o022)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds["out"], 1)
    os.dup2(fds["err"], 2)
    for fd in (devnull, fds["out"], fds["err"]):
        if fd > 2:
            os.close(fd)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    random.seed()
    tempfile._name_sequence = None  # type: ignore[attr-defined]  # reseeded on first use
    sys.argv = [
        "/opt/dockyard/runner.py",
        *[a.replace("{REPORT_FD}", str(fds["rep"])) for a in req["argv"]],
    ]
    code = 70
    try:
        code = sys.modules["runner"].main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _keeper(req: dict, fds: dict[str, int]) -> None:
    """Runs in ``C``; never returns. Reports ``G``'s wait status on the task socket."""
    status_sock = fds["sock"]
    try:
        keep = {fds[k] for k in ("sock", "out", "err", "rep", "root", *_NS)}
        os.closerange(3, min(keep))
        for fd in range(min(keep) + 1, max(keep)):
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        os.closerange(max(keep) + 1, 65536)
        for procs in req["procs"]:
            with open(procs, "w") as f:  # (single-threaded: the thread is the process)
                f.write("0")  # this process (and so everything it forks) joins the group
        for r, v in req["rlimits"]:
            resource.setrlimit(int(r), (int(v), int(v)))
        for name in _NS:
            _check(_libc.setns(fds[name], 0), f"setns {name}")
            os.close(fds[name])
        os.fchdir(fds["root"])
        os.chroot(".")
        os.close(fds["root"])
        pid = os.fork()
        if pid == 0:
            os.close(status_sock)
            _task(req, fds)
        for k in ("out", "err", "rep"):
            os.close(fds[k])
        os.write(status_sock, json.dumps({"pid": pid}).encode())
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                st = 9  # reaped elsewhere (cannot happen): report a kill
                break
            except InterruptedError:
                continue
        os.write(status_sock, json.dumps({"status": st}).encode())
        os._exit(0)
    except BaseException as e:
        try:
            os.write(status_sock, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        finally:
            os._exit(1)


def _serve(ctl: socket.socket) -> None:
    names = ("sock", "out", "err", "rep", "root", *_NS)
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        fds = array.array("i")
        try:
            msg, anc, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_LEN(_MAX_FDS * fds.itemsize))
        except InterruptedError:
            continue
        if not msg:
            return  # the service closed its end, or died: so does the zygote
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        got = list(fds)
        if len(got) != len(names):
            for fd in got:
                os.close(fd)
            continue
        named = dict(zip(names, got, strict=True))
        req = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            ctl.close()
            _keeper(req, named)
        for fd in got:
            os.close(fd)


_WARM_TEST = """\
import pytest


@pytest.fixture
def two():
    return 2


@pytest.mark.parametrize("x", [1, 2])
def test_param(x, two):
    assert x <= two


def test_fails():
    assert [1, 2] == [1, 3], "an explained failure"
"""


def _warm_up() -> None:
    """Run the runner's ``pytest`` mode once, here, on a test file of our own.

    Beyond the imports above, pytest's first run in a process imports a good deal lazily
    (assertion rewriting, fixtures, parametrisation, failure reports, the terminal writer):
    done once here, every fork starts with it in memory. The run mirrors a jail's (plugin
    autoload off, ``--pycache-prefix``, ``--select``); its traces (its module, path entries,
    caches, the prefix) are removed again, and the process-wide state pytest sets up it
    restores itself when the session ends.
    """
    runner = sys.modules["runner"]
    keep_path, keep_meta, keep_modules = list(sys.path), list(sys.meta_path), set(sys.modules)
    keep_argv, keep_cwd, keep_ws = sys.argv, os.getcwd(), runner.WORKSPACE
    saved = [os.dup(1), os.dup(2)]
    tmp = tempfile.mkdtemp(prefix="dockyard-zygote-warm-")
    try:
        with open(os.path.join(tmp, "test_warm.py"), "w") as f:
            f.write(_WARM_TEST)
        with open(os.path.join(tmp, "pytest.ini"), "w") as f:
            f.write("[pytest]\n")
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.chdir(tmp)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # as in every jail (jail.py)
        runner.WORKSPACE = tmp
        cfg = ["-p", "no:cacheprovider", "-c", f"{tmp}/pytest.ini", "--rootdir", tmp]
        cfg += ["--confcutdir", tmp, "-q", "--color=no", "-o", "console_output_style=classic"]
        ids = ["test_warm.py::test_param[1]", "test_warm.py::test_fails"]
        opts = ["--pycache-prefix", f"{tmp}/pycache", "--select", str(len(ids))]
        sys.argv = ["runner.py", "pytest", str(null), *opts, *cfg, *ids]
        runner.main()  # closes `null`; reports to its private copy of it
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if runner._out is not None:
            os.close(runner._out)
            runner._out = None
        runner.WORKSPACE = keep_ws
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        sys.argv = keep_argv
        sys.pycache_prefix = None
        os.chdir(keep_cwd)
        shutil.rmtree(tmp, ignore_errors=True)
        sys.path[:] = keep_path
        sys.meta_path[:] = keep_meta
        for name in set(sys.modules) - keep_modules:
            if name == "test_warm" or name.startswith("test_warm."):
                del sys.modules[name]
        for key in [k for k in sys.path_importer_cache if k.startswith(tmp)]:
            del sys.path_importer_cache[key]
        linecache.clearcache()
    gc.collect()
    # Objects that exist now are never scanned again by the collector, here or in a fork:
    # pytest collects at exit, and over the whole inherited heap that was ~50 ms a phase.
    gc.freeze()


def main() -> None:
    ctl_fd = int(sys.argv[1])
    sys.path.extend(p for p in sys.argv[2].split(":") if p)
    inside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inside")
    sys.path.insert(0, inside)
    importlib.import_module("runner")
    importlib.import_module("split")
    sys.path.remove(inside)
    # lazy: pytest is found only on the site dirs appended above from argv (-I -S: none before)
    import pytest  # noqa: F401

    # lazy: pytest is found only on the site dirs appended above from argv (-I -S: none before)
    from _pytest.config import default_plugins

    for name in default_plugins:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"_pytest.{name}")
    _warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if len(os.listdir("/proc/self/task")) != 1:  # keepers join cgroups thread-wise (tasks)
        raise SystemExit("runner zygote: imports started a thread; refusing to serve")
    ctl = socket.socket(fileno=ctl_fd)
    os.write(1, b"ready\n")
    _serve(ctl)


if __name__ == "__main__":
    main()
