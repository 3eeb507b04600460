"""Mount set-up for the ``unshare`` isolation backend (stdlib only; trusted code).

Runs as the first process of fresh pid, mount, ipc, uts (and network) namespaces created by
util-linux ``unshare --fork``, *before* any task code, and then ``exec``s the task::

    python -I -S unshare_setup.py --plan-fd N     # or '<json plan>' as the argument

The plan comes in fd ``N`` (a memfd; closed before anything of the task runs), not on the
command line: this process is the jail's pid 1, and its ``/proc/1/cmdline`` is readable by the
task (the plan names host paths).

The plan (built by :func:`dockyard.sandbox.isolation.unshare_argv`)::

    {"root": "/path/of/an/empty/dir",      # mount point of the new root (a tmpfs)
     "disk_bytes": int,                    # size of the /tmp and /dev/shm tmpfs
     "ro": [[host, inside], ...],          # read-only binds, in order
     "symlinks": [[target, inside], ...],  # e.g. /lib -> usr/lib on merged-/usr systems
     "dirs": ["/opt", ...],                # 0755 directories to create first
     "rw": [[host, inside], ...],          # the workspace
     "ro_after": [[host, inside], ...],    # held-out files and trusted inputs, over the workspace
     "hostname": "sandbox", "lo_up": bool, "cwd": "/workspace",
     "env": {...}, "argv": [...]}

Steps (mirroring what bwrap does): make every mount private; mount a tmpfs as the new root;
bind the toolchain read-only (recursively, every sub-mount remounted read-only too); a minimal
``/dev`` (null, zero, full, random, urandom, tty bound from the host, devpts-free); a fresh
``/proc`` of the new pid namespace; tmpfs ``/tmp`` and ``/dev/shm``; the workspace read-write
(nosuid, nodev); then ``pivot_root`` into it, detach the old root, remount ``/`` read-only, set
the hostname, bring loopback up, start a new session and exec ``argv`` with exactly ``env``.
Any failure exits 126 with a message on stderr (the service reports ``infra_error``).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import platform
import socket
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
_ST_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC}  # statvfs -> mount flags
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def mount(src: str | None, tgt: str, fstype: str | None, flags: int, data: str | None = None):
    if _libc.mount(_b(src), _b(tgt), _b(fstype), flags, _b(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} -> {tgt} ({fstype}, {flags:#x}): {os.strerror(e)}")


def _mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        pts = [line.split()[4].replace("\\040", " ") for line in f]
    return [p for p in pts if p == path or p.startswith(path.rstrip("/") + "/")]


def _remount_ro(path: str) -> None:
    """Remount ``path`` and every mount below it read-only, keeping nosuid/nodev/noexec."""
    for p in _mounts_under(path):
        try:
            st = os.statvfs(p).f_flag
        except OSError:
            continue
        keep = sum(v for k, v in _ST_FLAGS.items() if st & k)
        mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)


def _target(root: str, inside: str, is_dir: bool) -> str:
    t = root + inside
    if is_dir:
        os.makedirs(t, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(t), mode=0o755, exist_ok=True)
        if not os.path.exists(t):
            os.close(os.open(t, os.O_CREAT | os.O_WRONLY, 0o644))
    return t


def bind(root: str, host: str, inside: str, *, ro: bool, dev: bool = False) -> None:
    t = _target(root, inside, os.path.isdir(host))
    mount(host, t, None, MS_BIND | MS_REC)
    if ro:
        _remount_ro(t)
    else:
        mount(None, t, None, MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if dev else MS_NODEV))


def _lo_up() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS IFF_UP
    finally:
        s.close()


def setup(plan: dict) -> None:
    root = plan["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    os.makedirs(root + "/proc", 0o755)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = root + "/dev"
    os.makedirs(dev, 0o755)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists("/dev/" + name):
            bind(root, "/dev/" + name, "/dev/" + name, ro=False, dev=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{dev}/{name}")
    os.symlink("/proc/self/fd/1", dev + "/stdout")
    os.symlink("/proc/self/fd/2", dev + "/stderr")
    tmp_opts = f"mode=1777,size={int(plan['disk_bytes'])}"
    for d in ("/dev/shm", "/tmp"):
        os.makedirs(root + d, 0o755, exist_ok=True)
        mount("tmpfs", root + d, "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts)
    for target, inside in plan.get("symlinks", []):
        os.symlink(target, root + inside)
    for d in plan.get("dirs", []):
        os.makedirs(root + d, 0o755, exist_ok=True)
    for host, inside in plan.get("ro", []):
        bind(root, host, inside, ro=True)
    for host, inside in plan.get("rw", []):
        bind(root, host, inside, ro=False)
    for host, inside in plan.get("ro_after", []):
        bind(root, host, inside, ro=True)
    os.chdir(root)
    if _libc.syscall(_PIVOT_ROOT[platform.machine()], b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    if _libc.umount2(b".", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "detaching the old root failed")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    socket.sethostname(plan.get("hostname", "sandbox"))
    if plan.get("lo_up"):
        _lo_up()


def init(child: int) -> int:
    """pid 1 of the namespace: reap everything; return the task's status when it exits.

    When this returns, the kernel kills whatever is left in the pid namespace (daemons)."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 126
        except InterruptedError:
            continue
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def _read_plan(argv: list[str]) -> dict:
    if argv[1] != "--plan-fd":
        return json.loads(argv[1])
    fd, chunks = int(argv[2]), []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return json.loads(b"".join(chunks))


def main() -> None:
    plan = _read_plan(sys.argv)
    try:
        setup(plan)
    except BaseException as e:  # trusted set-up failed: no task code has run
        sys.stderr.write(f"dockyard-sandbox unshare set-up failed: {e!r}\n")
        os._exit(126)
    # The task is not pid 1: init ignores signals it has no handler for (SIGXFSZ, a SIGTERM
    # sent by a test), and its exit must end the namespace, as with bwrap.
    child = os.fork()
    if child:
        code = init(child)
        os._exit(128 - code if code < 0 else code)  # killed by signal N -> 128 + N, like bwrap
    os.setsid()
    argv, env = plan["argv"], plan["env"]
    try:
        os.chdir(plan["cwd"])
        exe = argv[0]
        if "/" not in exe:
            exe = next(
                (
                    f"{d}/{exe}"
                    for d in env.get("PATH", "/usr/bin:/bin").split(":")
                    if os.access(f"{d}/{exe}", os.X_OK)
                ),
                exe,
            )
        os.execve(exe, argv, env)
    except OSError as e:
        sys.stderr.write(f"dockyard-sandbox: cannot exec {argv[0]!r}: {e}\n")
        os._exit(127)


if __name__ == "__main__":
    main()
