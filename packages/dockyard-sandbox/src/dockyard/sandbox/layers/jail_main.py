"""The build jail: one Dockerfile step as root of a user namespace over an overlay (stdlib only).

Run as ``python -I -S jail_main.py`` with a JSON plan on stdin, or, as the service runs every
jail, in a fork of the *jail server* (``python -I -S -B jail_main.py --serve <fd>``, host root,
started once per service, every module any op needs imported at the top: ``serve``) that joins the
jail's cgroups and takes its rlimits first. A plan::

    {"uid_base": 1000000, "uid_count": 65536,      # inside uid/gid 0.. -> host uid_base..
     "chdir": dir | null,                            # lower dirs may be relative to it
     "lower": [dir, ...],                            # read-only layers, top first, base last
     "upper": dir | null, "work": dir | null,        # the new layer (null: read-only, export)
     "merged": dir,                                  # an empty dir: the overlay's mount point
     "op": "run" | "copy" | "export" | "unpack" | "hold" | "enter" | "verify",
     "cwd": "/app", "env": {...}, "user": "root" | "name[:group]" | "uid[:gid]",
     "argv": [...],                                  # run: exec'd in the root
     "tar": path, "sources": [{"entry", "name"}], "dest": str, "chown": str|null,
     "chmod": str|null,                              # copy: extract ``tar`` Docker's way
     "paths": [...],                                 # export: tar these paths into ``tar``
     "forwarder": str|null, "sock_dir": dir|null, "sock_name": str, "port": int,  # egress (egress.py)
     "egress_dir": "/abs" | null,                    # where sock_dir is mounted (verify: not the session's)
     "binds": [{"src": dir, "dst": "/abs", "ro": bool}, ...],   # run: host dirs in the root
     "ready_fd": int,                                # run: one byte once set up (runner.py)
     "pid_fd": int,                                  # hold: "pid:<host pid of pid 1>\n", "ready\n"
     "pid": int, "userns": int,                      # enter, verify: the holder's pid 1, its user ns
     "hide": [path, ...],                            # verify: mounts of the container it must not see
     "root": dir}                                    # verify: an empty dir, its root (the ns root's)

``binds`` (a verifier's workspace, /tests, /logs: ``scriptverify.py``) are mounted after the
overlay, each destination walked one component at a time in the merged root with no symlink
followed (the image is the task's content: a link there must not aim a mount elsewhere); a
link on the way is a ``dockyard-build: content:`` setup failure (the task's, not the service's).

Chain: the jail's process (the script, or the server's fork) forks a child that ``unshare``s
user, mount, pid, ipc, uts and net namespaces; this (host-root) process writes the child's ``uid_map``/``gid_map`` (0..N-1 ->
uid_base.., which a host root may, with no ``/etc/subuid``), then the child becomes uid 0 of
its namespace (host uid ``uid_base``: unprivileged outside) and forks pid 1 of the new pid
namespace. Pid 1 mounts the overlay (``userxattr``: whiteouts are 0/0 character devices and
opaque directories carry ``user.overlay.opaque``, both understood when the layer is later a
lower layer), a fresh ``/proc``, a minimal ``/dev``, brings loopback up, starts the egress
forwarder, ``pivot_root``s into the merged root (the old root detached: unlike a chroot, the
namespace's root cannot climb back out) and runs the step. When pid 1 exits the kernel kills
every process left in the namespace, so the layer is still once this script returns (the host
may then read it without racing a writer). Exit status: the step's; 125 and a
``dockyard-build:`` line on stderr when the jail itself could not be set up.

A session's *container* (``container.py``) is the same jail with ``op: hold``: pid 1 sets it up,
reports, then only reaps until the host kills it; every command of the session is an ``op:
enter``: a fork that joins pid 1's namespaces (``setns`` on a pidfd, checked against the
user namespace's inode the holder reported, so a reused pid is refused), becomes the
namespace's root and forks the command (the first process of ours in the container's pid
namespace, which execs it as a ``run`` step's would be). The entering process is
non-dumpable (``PR_SET_DUMPABLE`` 0, as runc's ``nsexec`` does): while it is a host process inside
the container's namespaces nothing in them can ptrace it or open its ``/proc`` entries.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tarfile
import threading  # noqa: F401  (in sys.modules before the pivot, for the forwarder's own import)
from collections.abc import Callable, Iterator

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
MS_RDONLY, MS_REMOUNT, MNT_DETACH = 1, 32, 2
ENTER_FLAGS = (
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
)
VERIFY_FLAGS = ENTER_FLAGS & ~CLONE_NEWPID  # its own pid namespace (``_verify``)
_OPEN_TREE, _MOVE_MOUNT = 428, 429  # the same number on every architecture (asm-generic)
OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY, AT_RECURSIVE, AT_SYMLINK_NOFOLLOW = 1, 4, 0x8000, 0x100
_ATIME_FLAGS = 1024 | 2048 | 4096  # MS_NOATIME, MS_NODIRATIME, MS_RELATIME (= statvfs's ST_*)
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
EGRESS_DIR = "/dev/.egress"  # where the proxy's dir is mounted, unless ``egress_dir`` says
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class SetupError(Exception):
    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(e)}", e)


def mount(src: str | None, tgt: str, fstype: str | None, flags: int, data: str | None = None):
    enc = [None if s is None else os.fsencode(s) for s in (src, tgt, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {fstype or src} {tgt}")


def _lo_up() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
    finally:
        s.close()


def _mount_root(plan: dict) -> str:
    merged = plan["merged"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if plan.get("chdir"):
        os.chdir(plan["chdir"])  # lower dirs may be relative to it (one page of mount options)
    lower = ":".join(plan["lower"])
    if plan.get("upper"):
        opts = f"lowerdir={lower},upperdir={plan['upper']},workdir={plan['work']},userxattr"
        mount("overlay", merged, "overlay", 0, opts)
    elif len(plan["lower"]) == 1:
        mount(plan["lower"][0], merged, None, MS_BIND | MS_REC)
    else:
        mount("overlay", merged, "overlay", MS_RDONLY, f"lowerdir={lower},userxattr")
    if plan["op"] not in ("run", "hold"):
        return merged
    mount("proc", f"{merged}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = f"{merged}/dev"
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    for d in DEVICES:
        open(f"{dev}/{d}", "w").close()
        mount(f"/dev/{d}", f"{dev}/{d}", None, MS_BIND)
    os.mkdir(f"{dev}/shm", 0o1777)
    mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    os.mkdir(f"{dev}/pts", 0o755)  # terminals (tmux, script, ssh -t), as Docker's /dev has
    mount(
        "devpts",
        f"{dev}/pts",
        "devpts",
        MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    if plan.get("sock_dir"):
        os.mkdir(f"{merged}{EGRESS_DIR}", 0o755)
        mount(plan["sock_dir"], f"{merged}{EGRESS_DIR}", None, MS_BIND)
        _remount_ro(f"{merged}{EGRESS_DIR}")
    for b in plan.get("binds") or ():
        target = _bind_target(merged, b["dst"])
        mount(b["src"], target, None, MS_BIND | MS_REC)
        if b.get("ro"):
            _remount_ro(target)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{dev}/{name}")
    return merged


def _remount_ro(target: str) -> None:
    """A bind made read-only and nosuid, keeping the flags its source's mount has (a mount
    from the host's namespace has them locked: dropping one, e.g. a tmpfs's nodev, is EPERM)."""
    keep = os.statvfs(target).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | _ATIME_FLAGS)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | keep)


def _bind_target(merged: str, dst: str) -> str:
    """``merged + dst`` with every missing directory made (0755) and no symlink followed."""
    parts = [p for p in dst.split("/") if p]
    if not dst.startswith("/") or any(p in (".", "..") for p in parts):
        raise SetupError(f"bind destination {dst!r}: not a plain absolute path")
    path = merged
    for p in parts:
        path = f"{path}/{p}"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise SetupError(f"content: {dst} is not a directory in the image (at /{p})")
    return path


def _forwarder(plan: dict) -> int:
    """The egress forwarder (``egress.FORWARDER``: 127.0.0.1:port -> the proxy's socket, bound
    read-only at /dev/.egress, on the jail's own /dev tmpfs: nothing lands in the layer). A fork
    of this process, already inside the pivoted root: it sees only what the step sees. Port 0
    (a live verifier's, in the agent's network namespace): a free port the kernel picks, so no
    listener of the agent's (or a previous verifier's, still dying) can stand in for it; the
    port it listens on is returned."""
    port, listener = int(plan["port"]), None
    if port == 0:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        code = 1
        for fd in (plan.get("ready_fd"), plan.get("pid_fd")):
            if fd is not None:
                os.close(fd)
        try:
            sock = f"{plan.get('egress_dir') or EGRESS_DIR}/{plan['sock_name']}"
            where = f"fd:{listener.fileno()}" if listener is not None else str(port)
            sys.argv = ["forwarder", where, sock]
            code = 0  # (the forwarder exits 0 itself once it listens: it forks again)
            exec(compile(plan["forwarder"], "forwarder", "exec"), {"__name__": "forwarder"})
        except BaseException as e:
            print(f"dockyard-build: the registry forwarder did not start: {e!r}", file=sys.stderr)
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    if listener is not None:
        listener.close()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SetupError("the registry forwarder did not start")
    return port


def _pivot(new_root: str) -> None:
    """``pivot_root(new, new)`` then detach the old root: no path leads back to the host's
    tree (a chroot could be left by the namespace's root)."""
    os.chdir(new_root)
    _check(_libc.syscall(_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the old root")
    os.chdir("/")


def _entries(path: str) -> list[list[str]]:
    """The colon-separated entries of the root's ``/etc/passwd`` or ``/etc/group``, read as a
    file (as runc's user lookup does) — never through NSS, which would load the libraries the
    root's ``/etc/nsswitch.conf`` names into this process, before the step runs (a library of
    the agent's in a live verifier's pid 1). Only a regular file, its first 4 MiB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = os.read(fd, 4 << 20).decode("utf-8", "replace")
    except OSError:
        return []
    finally:
        os.close(fd)
    return [line.split(":") for line in data.splitlines() if line and line[0] not in "#+-"]


def _user(by: str | int) -> tuple[str, int, int, str] | None:
    """(name, uid, gid, home) of the passwd entry named ``by`` (a str) or with uid ``by``."""
    for e in _entries("/etc/passwd"):
        if len(e) < 6 or not (e[2].isdigit() and e[3].isdigit()):
            continue
        if (e[0] == by) if isinstance(by, str) else (int(e[2]) == by):
            return e[0], int(e[2]), int(e[3]), e[5]
    return None


def _group_gid(name: str) -> int | None:
    for e in _entries("/etc/group"):
        if len(e) >= 3 and e[0] == name and e[2].isdigit():
            return int(e[2])
    return None


def _groups_of(name: str, gid: int) -> list[int]:
    """``getgrouplist``: ``gid``, then every group listing ``name`` among its members."""
    gids = [gid]
    for e in _entries("/etc/group"):
        if len(e) >= 4 and e[2].isdigit() and name in e[3].split(",") and int(e[2]) not in gids:
            gids.append(int(e[2]))
    return gids


def _ids(spec: str | None) -> tuple[int, int]:
    """``user[:group]`` (names from the image's /etc/passwd and /etc/group) -> (uid, gid)."""
    if not spec or spec == "root":
        return 0, 0
    user, _, group = spec.partition(":")
    if user.isdigit():
        uid = int(user)
        ent = _user(uid)
        gid = ent[2] if ent else uid
    else:
        ent = _user(user)
        if ent is None:
            raise SetupError(f"unable to find user {user}: no matching entries in passwd file")
        uid, gid = ent[1], ent[2]
    if group:
        found = int(group) if group.isdigit() else _group_gid(group)
        if found is None:
            raise SetupError(f"unable to find group {group}")
        gid = found
    return uid, gid


def _prepare(plan: dict) -> tuple[int, int]:
    """Say the jail is set up (what follows is the step's: its image, user, workdir), enter the
    workdir; the user's (uid, gid)."""
    ready = plan.get("ready_fd")
    if ready is not None:
        os.write(ready, b"1")
        os.close(ready)
    os.makedirs(plan["cwd"], exist_ok=True)  # Docker creates the WORKDIR for RUN too
    os.chdir(plan["cwd"])
    uid, gid = _ids(plan.get("user"))
    if "HOME" not in plan["env"]:  # as Docker: the user's home from the image's /etc/passwd
        ent = _user(uid)
        plan["env"]["HOME"] = ent[3] if ent else "/root" if uid == 0 else "/"
    return uid, gid


# a command starts as Docker's do: every signal at its default and none blocked, whatever this
# process inherited (Python ignores SIGPIPE and SIGXFSZ; a service started under `nohup`,
# SIGHUP): a command writing to a closed pipe dies of SIGPIPE (`yes | head -1`)
_DEFAULT_SIGNALS = tuple(
    sorted(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
)


def _become(uid: int, gid: int) -> None:
    """Take the user's ids (from root): its groups as the image's /etc/group lists them."""
    if uid:
        ent = _user(uid)
        os.setgroups(_groups_of(ent[0], gid) if ent else [gid])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)


def _exec(plan: dict, uid: int, gid: int) -> int:
    """Become the step's process: a session of its own, the user's ids, the default signal
    dispositions, ``argv``."""
    try:
        os.setsid()
        for sig in _DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        _become(uid, gid)
        os.execve(plan["argv"][0], plan["argv"], plan["env"])
    except OSError as e:
        print(f"dockyard-build: {plan['argv'][0]}: {e.strerror}", file=sys.stderr)
        sys.stderr.flush()
    os._exit(127)


def _run(plan: dict) -> int:
    uid, gid = _prepare(plan)
    pid = os.fork()
    if pid == 0:
        _exec(plan, uid, gid)
    while True:  # pid 1: reap everything, return the step's own status
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 0
        if done == pid:
            return os.waitstatus_to_exitcode(status) % 256


def _hold(plan: dict) -> int:
    """Pid 1 of a session's container: set up, say so, then reap what is entered into it
    (``op: enter``: orphans come to pid 1) until the host kills the namespace."""
    for fd, word in ((plan.get("ready_fd"), b"1"), (plan.get("pid_fd"), b"ready\n")):
        if fd is not None:
            os.write(fd, word)
            os.close(fd)
    os.chdir("/")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # pending until sigwait takes it
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        signal.sigwait({signal.SIGCHLD})


def _join(plan: dict, flags: int) -> None:
    """Join the holder's namespaces (``flags`` of them), non-dumpable first (module docstring)."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    pid, pidfd = int(plan["pid"]), -1
    try:
        pidfd = os.pidfd_open(pid)
        same = os.stat(f"/proc/{pid}/ns/user").st_ino == int(plan["userns"])
    except OSError:
        same = False
    if not same:
        raise SetupError("the session's container has ended")
    _check(_libc.setns(pidfd, flags), "entering the session's container")
    os.close(pidfd)


def _enter(plan: dict) -> int:
    """``op: enter`` (module docstring): join the holder's namespaces, run ``argv`` as ``run``.
    The first process of ours in its pid namespace becomes the command (not pid 1: the
    container's pid 1 reaps what it leaves behind). Where the jail is in cgroups of its own
    (``cgroups``: the service kills what is left there), it is spawned (vfork + exec: no copy
    of this process; a command's round trip ~3 ms sooner at load ~1.8, docs/benchmarks.md);
    elsewhere it is forked, to die with this process (``_root_child``'s death signal) when the
    service kills it at its timeout."""
    _join(plan, ENTER_FLAGS)
    if not plan.get("cgroups"):
        return _root_child(lambda: _exec(plan, *_prepare(plan)))
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    _become(*_prepare(plan))  # this process only waits from here on: the command's ids
    try:
        pid = os.posix_spawn(plan["argv"][0], plan["argv"], plan["env"], setsid=True,
                             setsigdef=_DEFAULT_SIGNALS, setsigmask=())  # fmt: skip
    except OSError as e:
        print(f"dockyard-build: {plan['argv'][0]}: {e.strerror}", file=sys.stderr)
        return 127
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) % 256


def _open_tree(path: str, dirfd: int = -100, flags: int = 0) -> int:
    """A detached copy of the bind mount of ``path`` (``open_tree(2)``), to attach elsewhere
    (``_attach``) — in another mount namespace, where a path of the host no longer resolves."""
    fd = _libc.syscall(_OPEN_TREE, dirfd, os.fsencode(path), OPEN_TREE_CLONE | os.O_CLOEXEC | flags)
    if fd < 0:
        _check(-1, f"open_tree {path}")
    return fd


def _attach(tree: int, target: str, dirfd: int = -100) -> None:
    rc = _libc.syscall(_MOVE_MOUNT, tree, b"", dirfd, os.fsencode(target), MOVE_MOUNT_F_EMPTY)
    _check(rc, f"move_mount {target}")
    os.close(tree)


def _verify(plan: dict) -> int:
    """``op: verify``: a script verifier in the *live* container, as ``docker exec`` runs it,
    with what the agent's processes cannot reach. It joins pid 1's user, mount, network, ipc and
    uts namespaces (the agent's servers answer on localhost), takes a private copy of its mount
    namespace and a new pid namespace (a sibling of the container's: no process of the agent
    sees one of the verifier's, so none reaches its mounts through ``/proc/<pid>/root``), and
    pivots into a root of its own (``_live_root``): the container's top-level entries bound in
    (its files, live), and beside them ``binds`` from the host (``/tests`` read-only, ``/logs``:
    the reward file exists only there), the egress dir and a fresh ``/proc``; ``hide`` (the
    agent's terminal) unmounted. Its pid 1 runs ``argv`` as a ``run`` step's pid 1 does."""
    binds = list(plan.get("binds") or ())
    if plan.get("sock_dir"):
        binds.append({"src": plan["sock_dir"], "dst": plan["egress_dir"], "ro": True})
    for b in binds:
        if b["dst"].count("/") != 1 or b["dst"] in ("/", "/.", "/..", "/proc"):
            raise SetupError(f"verify: {b['dst']!r} is not a top-level path of its own")
    trees = [(b, _open_tree(b["src"])) for b in binds]  # host paths: before the namespaces
    root = _open_tree(plan["root"])  # an empty host dir the namespace's root may write
    _join(plan, VERIFY_FLAGS)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    with _agents_mounts():
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare")

    def pid1() -> int:
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of ours propagates to the agent's
        with _agents_mounts():
            _live_root(root, trees)
        for path in plan.get("hide") or ():
            with contextlib.suppress(SetupError):
                _check(_libc.umount2(os.fsencode(path), MNT_DETACH), f"umount {path}")
        for b, _ in trees:
            if b.get("ro"):
                _remount_ro(b["dst"])
        if plan.get("forwarder"):
            port = _forwarder(plan)
            # the proxy variables name port 0 (runner.egress_plan): the one listened on
            url = ("http://127.0.0.1:0/", f"http://127.0.0.1:{port}/")
            plan["env"] = {k: v.replace(*url) for k, v in plan["env"].items()}
        return _run(plan)

    return _root_child(pid1)


@contextlib.contextmanager
def _agents_mounts() -> Iterator[None]:
    """A live verifier's namespace copies the container's mounts and binds each of its
    top-level entries: past the kernel's ``fs.mount-max`` (ENOSPC) only through what the agent
    made (mounts, or ~10^5 entries at /), so the task's doing — a verdict, not the service's."""
    try:
        yield
    except SetupError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise SetupError(
            f"content: {e} — the container holds more mounts or top-level entries than a live "
            "verifier's view can copy (the kernel's fs.mount-max)"
        ) from e


def _live_root(root: int, trees: list[tuple[dict, int]]) -> None:
    """Pivot into ``root`` (a detached mount) holding the container's top-level entries — each
    directory or file a recursive bind of the container's (so its files are the live ones),
    each link a copy — and the ``trees`` at their own top-level names. Nothing here is reached
    through a path the agent's processes can change: the entries are opened by fd from the old
    root, and ``/tests``, ``/logs`` are directories of ``root``, which no process of the agent
    can reach, not mountpoints on the shared image (which one could rename away meanwhile)."""
    ours = {b["dst"][1:] for b, _ in trees} | {"proc"}
    old = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    _attach(os.dup(root), "/")  # stacked on the old root (ours, unlike any path in it)
    try:
        for name in os.listdir(old):
            if name in ours:
                continue
            try:
                st = os.lstat(name, dir_fd=old)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(name, dir_fd=old), name, dir_fd=root)
                    continue
                if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    continue
                tree = _open_tree(name, old, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW)
            except (OSError, SetupError):
                continue  # gone or changed meanwhile: the agent's doing, left out of the view
            is_dir = stat.S_ISDIR(st.st_mode)
            if is_dir:
                os.mkdir(name, 0o755, dir_fd=root)
            else:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=root))
            rc = _libc.syscall(_MOVE_MOUNT, tree, b"", root, os.fsencode(name), MOVE_MOUNT_F_EMPTY)
            if rc != 0 and ctypes.get_errno() == errno.ENOENT:  # unlinked since it was opened
                os.close(tree)  # (the agent's doing): left out, as above
                (os.rmdir if is_dir else os.unlink)(name, dir_fd=root)
                continue
            _check(rc, f"move_mount {name}")
            os.close(tree)
    finally:
        os.close(old)
    for b, tree in trees:
        os.mkdir(b["dst"][1:], 0o755, dir_fd=root)
        _attach(tree, b["dst"][1:], root)
    os.mkdir("proc", 0o555, dir_fd=root)
    os.fchdir(root)
    os.close(root)
    # this pid namespace's /proc, mounted while the container's is still in the namespace (a
    # new proc mount needs a visible one beside it)
    mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _pivot(".")


def _root_child(body: Callable[[], int], forked: Callable[[int], None] | None = None) -> int:
    """Become the namespace's root, run ``body`` in a child (the first process of the new pid
    namespace: unshared or entered), ``forked(its host pid)``, return its exit status."""
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    pid = os.fork()
    if pid == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            code = body()
        except (SetupError, OSError) as e:
            print(f"dockyard-build: {e}", file=sys.stderr)
            code = SETUP_FAILED
        except tarfile.TarError as e:
            print(f"dockyard-build: bad copy payload: {e}", file=sys.stderr)
            code = SETUP_FAILED
        sys.stderr.flush()
        os._exit(code)
    if forked is not None:
        forked(pid)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) % 256


def _copy(plan: dict) -> int:
    """Docker's COPY: each source (``tar`` holds one entry per source) goes *into* ``dest`` when
    ``dest`` ends with ``/``, is an existing directory or there are several sources, else *to*
    ``dest``; a directory source's contents go into ``dest``. New parents are root 0755; copied
    files keep their mode (``--chmod`` overrides) and are owned by ``--chown`` or 0:0."""
    uid, gid = _ids(plan.get("chown"))
    mode = int(plan["chmod"], 8) if plan.get("chmod") else None
    dest = plan["dest"] if plan["dest"].startswith("/") else os.path.join(plan["cwd"], plan["dest"])
    into = plan["dest"].endswith("/") or os.path.isdir(dest) or len(plan["sources"]) > 1
    with tarfile.open(fileobj=os.fdopen(plan["tar_fd"], "rb"), mode="r:") as tf:
        members = tf.getmembers()
        for src in plan["sources"]:
            entry = src["entry"]
            top = next((m for m in members if m.name == entry), None)
            if top is None:
                raise SetupError(f"COPY: source {src['name']!r} is missing from the payload")
            base = dest if (top.isdir() or not into) else os.path.join(dest, src["name"])
            os.makedirs(os.path.dirname(base.rstrip("/")) or "/", exist_ok=True)
            for m in members:
                if m.name != entry and not m.name.startswith(entry + "/"):
                    continue
                target = os.path.normpath(base + m.name[len(entry) :])
                _place(tf, m, target, uid, gid, mode)
    return 0


def _place(tf: tarfile.TarFile, m: tarfile.TarInfo, target: str, uid: int, gid: int,
           mode: int | None) -> None:  # fmt: skip
    if m.isdir():
        if not os.path.isdir(target):
            if os.path.lexists(target):
                os.unlink(target)
            os.makedirs(target)
        perm = m.mode & 0o7777
    else:
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
        elif os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        if m.issym():
            os.symlink(m.linkname, target)
            os.lchown(target, uid, gid)
            return
        src = tf.extractfile(m)
        if src is None:
            return
        with open(target, "wb") as out:
            shutil.copyfileobj(src, out)
        perm = m.mode & 0o777
    os.lchown(target, uid, gid)
    os.chmod(target, mode if mode is not None else perm)


def _export(plan: dict) -> int:
    """``COPY --from``'s reading side: ``paths`` of this (read-only) root into a tar, one
    entry per path (``s0``, ``s1``...), links not followed beyond the path itself."""
    with tarfile.open(fileobj=os.fdopen(plan["tar_fd"], "wb"), mode="w:") as tf:
        for i, p in enumerate(plan["paths"]):
            real = os.path.realpath(p)  # resolved inside this root (we are chrooted)
            if not os.path.lexists(real):
                print(f"dockyard-build: COPY --from: {p}: no such file or directory",
                      file=sys.stderr)  # fmt: skip
                return 1
            tf.add(real, arcname=f"s{i}", recursive=True)
    return 0


def _unpack(plan: dict) -> int:
    """A base root: ``tar`` (mmdebstrap's output, owned by the image's ids) unpacked as the
    namespace's root into the empty root, so ownership lands shifted by ``uid_base``."""
    with tarfile.open(fileobj=os.fdopen(plan["tar_fd"], "rb"), mode="r:") as tf:
        for m in tf:
            if m.ischr() or m.isblk() or m.isfifo():
                continue  # /dev is the jail's own
            tf.extract(m, "/", set_attrs=True, numeric_owner=True, filter="fully_trusted")
    os.makedirs("/dev", mode=0o755, exist_ok=True)  # mmdebstrap's output/dev was skipped
    return 0


def _inner(plan: dict) -> int:
    """Pid 1 of the jail: mounts, the copy payload's fd, pivot, forwarder, the step."""
    if plan["op"] != "hold" and plan.get("pid_fd") is not None:
        os.close(plan["pid_fd"])
    merged = _mount_root(plan)
    if plan["op"] in ("run", "hold"):
        _lo_up()
    if plan.get("tar"):
        flags = (
            os.O_RDONLY
            if plan["op"] in ("copy", "unpack")
            else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        )
        plan["tar_fd"] = os.open(plan["tar"], flags | os.O_CLOEXEC, 0o600)
    _pivot(merged)
    if plan["op"] in ("run", "hold"):
        if plan.get("forwarder"):
            _forwarder(plan)
        return _run(plan) if plan["op"] == "run" else _hold(plan)
    return {"copy": _copy, "export": _export, "unpack": _unpack}[plan["op"]](plan)


def _child(plan: dict, ready_w: int, go_r: int) -> int:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
    _check(_libc.unshare(flags), "unshare")
    os.write(ready_w, b"1")
    if os.read(go_r, 1) != b"1":
        raise SetupError("the id maps were not written")

    def report(pid: int) -> None:  # the host pid of the container's pid 1 (container.py)
        if plan.get("pid_fd") is not None:
            os.write(plan["pid_fd"], f"pid:{pid}\n".encode())
            os.close(plan["pid_fd"])

    return _root_child(lambda: _inner(plan), report)


def run(plan: dict) -> int:
    """One plan in this process (a script's, or a fork of the server's): its exit status. An
    ``enter`` returns from inside the container's namespaces: the caller ``_exit``s at once."""
    if plan["op"] in ("enter", "verify"):
        try:
            return _enter(plan) if plan["op"] == "enter" else _verify(plan)
        except (SetupError, OSError) as e:
            print(f"dockyard-build: {e}", file=sys.stderr)
            return SETUP_FAILED
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        try:
            code = _child(plan, ready_w, go_r)
        except (SetupError, OSError) as e:
            print(f"dockyard-build: {e}", file=sys.stderr)
            code = SETUP_FAILED
        sys.stderr.flush()
        os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    for key in ("pid_fd", "ready_fd"):  # the child has them (this process writes neither)
        if plan.get(key) is not None:
            os.close(plan[key])
    try:
        if os.read(ready_r, 1) == b"1":
            base, n = int(plan["uid_base"]), int(plan["uid_count"])
            for f in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{f}", "w") as fh:
                    fh.write(f"0 {base} {n}\n")
            os.write(go_w, b"1")
    except OSError as e:
        print(f"dockyard-build: writing the id maps: {e}", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    os.close(ready_r)
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) % 256


_MAX_FDS = 8  # per request: reply, out, err, done_fd and the plan's fds (ready_fd, pid_fd)


def serve(ctl_fd: int) -> None:
    """The jail server (``runner.py``): for each request on ``ctl_fd`` (a JSON object: ``plan``,
    ``fds`` naming the descriptors that come with it, ``join``: cgroup files, ``rlimits``: [[res,
    value]...]) a child of the server joins the cgroups, takes the rlimits and the request's
    stdio, and runs the plan as this script would; the server sends the service its pidfd on the
    request's ``reply`` socket, and once it is reaped here its wait status. A child given a
    ``done_fd`` (runner.py) writes its exit code there as it ends, closing its stdio first: the
    service has it before the child's teardown, the reaping and this message. A fork costs ~1 ms
    where a fresh interpreter costs ~25: a container's every command is one. The child is forked
    *before* its request comes (``_Spare``): the command waits for neither the fork nor the
    child's first run."""
    ctl = socket.socket(fileno=ctl_fd)
    waiting: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, reply fd)
    poller = select.poll()
    poller.register(ctl_fd, select.POLLIN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if len(os.listdir("/proc/self/task")) != 1:  # children join cgroups thread-wise (tasks)
        raise SystemExit("jail server: a thread was started; refusing to serve")
    spare = _Spare()
    os.write(1, b"ready\n")
    while True:
        for fd, _ in poller.poll():
            if fd != ctl_fd:
                pid, reply = waiting.pop(fd)
                poller.unregister(fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    os.write(reply, b"status:%d" % status)
                for f in (fd, reply):
                    os.close(f)
                continue
            try:
                msg, got = _recv(ctl)
            except InterruptedError:
                continue
            if not msg:
                return  # the service closed its end, or died: so does every jail (pdeathsig)
            names = json.loads(msg).get("fds") or []
            if len(got) != len(names) or "reply" not in names:
                for f in got:
                    os.close(f)  # the reply socket closed unanswered: the service reports it
                continue
            named = dict(zip(names, got, strict=True))
            reply = named.pop("reply")
            pid = spare.hand(msg, named)
            if not pid:  # the spare was gone (killed): a fresh one takes the request
                pid = _Spare().hand(msg, named)
            for f in named.values():
                os.close(f)
            if pid:
                pidfd = os.pidfd_open(pid)  # not reaped before the poll says so: not reused
                with contextlib.suppress(OSError), socket.socket(fileno=os.dup(reply)) as r:
                    socket.send_fds(r, [b"pid"], [pidfd])
                waiting[pidfd] = (pid, reply)
                poller.register(pidfd, select.POLLIN)
            else:
                os.close(reply)  # (unanswered, as above)
            spare = _Spare()  # the next request's, forked while this one runs


def _recv(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it."""
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(1 << 20, socket.CMSG_LEN(_MAX_FDS * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds)


class _Spare:
    """A fork of the server waiting for the next request (``serve``): it closes every descriptor
    of the server's but its stdio at once, and dies with the server."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            _waits(theirs, server)
        theirs.close()
        self.chan = ours

    def hand(self, msg: bytes, named: dict[str, int]) -> int:
        """Give it the request (its fds named, less the reply): its pid, or 0 where it could
        not take it (it is gone, reaped: the request goes unanswered)."""
        try:
            socket.send_fds(self.chan, [msg], list(named.values()))
            return self.pid
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            return 0
        finally:
            self.chan.close()


def _waits(chan: socket.socket, server: int) -> None:
    """The spare's life: wait for its request, then serve it (``_served``); never returns."""
    with contextlib.suppress(BaseException):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        keep = chan.fileno()
        os.closerange(3, keep)  # the server's socket, other jails' replies and pidfds
        os.closerange(keep + 1, 1 << 20)
        if os.getppid() != server:  # it died before the death signal was armed
            os._exit(SETUP_FAILED)
        msg, got = _recv(chan)
        chan.close()
        if msg:
            names = [n for n in json.loads(msg)["fds"] if n != "reply"]
            _served(json.loads(msg), dict(zip(names, got, strict=True)))
    os._exit(SETUP_FAILED)


def _close_if(fd: int, was: os.stat_result) -> None:
    """Close ``fd`` if it is still the file it was (not a number reused since)."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (was.st_dev, was.st_ino):
            os.close(fd)


def _served(req: dict, fds: dict[str, int]) -> None:
    """A fork of the server running one request (``serve``); never returns."""
    code, done = SETUP_FAILED, -1
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # every jail dies with the server
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds.pop("out"), 1)
        os.dup2(fds.pop("err"), 2)
        low = 3  # close all but stdio and the plan's: the server's socket, other jails' replies
        for fd in sorted(v for k, v in fds.items() if k.endswith("_fd")):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        done = fds.pop("done_fd", -1)
        if done >= 0:  # this process's alone: no program it execs, no process it forks has it
            os.set_inheritable(done, False)  # (received fds are inheritable)
            os.register_at_fork(after_in_child=functools.partial(_close_if, done, os.fstat(done)))
        joined = req.get("join") or ()
        for path in joined:
            with open(path, "w") as f:  # (single-threaded: the thread is the process)
                f.write("0")  # this process, and so everything it forks, joins the group
        for res, value in req.get("rlimits") or ():
            resource.setrlimit(int(res), (int(value), int(value)))
        own = {k: v for k, v in fds.items() if k.endswith("_fd")} | {"cgroups": bool(joined)}
        code = run(req["plan"] | own)
    except BaseException as e:  # (reported as the jail's setup failure)
        print(f"dockyard-build: {e}", file=sys.stderr)
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        if done >= 0:  # the exit code now, not after this process's teardown (~0.4 ms)
            with contextlib.suppress(BaseException):
                os.close(1)  # (the output's EOF is the command's then: runner.py reads to it)
                os.close(2)
                os.write(done, b"%d" % (code % 256))
        os._exit(code)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
        return
    # dies with the service's thread that started it (the chain below dies with this process)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    code = run(json.loads(sys.stdin.read()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # an enter: nothing more runs in the container's namespaces


if __name__ == "__main__":
    main()
