"""A session's persistent interactive terminal: a tmux server in a long-lived jail.

Every ``exec`` of a session is a fresh jail, so nothing interactive survives between calls.
Programs that need a TTY (editors, REPLs, curses UIs) get one pane that does:

* **The server jail** (started on the first keystroke call, one per session): the usual bwrap
  jail of the session (its uid, workspace, environment mounts, pid/mount/ipc/net namespaces,
  the session's memory and pids cgroup limits, rlimits) running ``tmux new-session -d`` and
  then a loop that lives as long as the tmux session does. Its wall clock is the service's
  ``MAX_LIFE_S``; it is killed (the whole pid namespace with it) when the session is deleted or
  reaped, and on service shutdown. The pane's processes live in *this* jail, not in the exec
  jails (they see the same workspace, not each other's processes).
* **The socket** lives in a tiny per-session tmpfs (owned by the session's uid) mounted at
  ``/tmp/.tty`` in the server jail and in each key jail, never in the workspace.
* **Each keystroke call** is another short jail of the same uid with the socket mount that
  runs the tmux *client* there (never on the host: a tmux client obeys its server, and the
  server is the agent's). Keys arrive as positional arguments of a fixed script (literal text
  with ``send-keys -l --``, names from a fixed list), after ``wait_s`` the pane is captured.
"""

from __future__ import annotations

import re
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox import egress
from dockyard.sandbox.envspec import TtyRequest, TtyResult
from dockyard.sandbox.jail import Cancel, JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.layers.container import Container
from dockyard.sandbox.models import Limits
from dockyard.sandbox.provision import Provisioned
from dockyard.sandbox.toolchain import WORKSPACE

MAX_LIFE_S = 86_400.0
SOCK_MOUNT = "/tmp/.tty"  # (a dir bwrap would create under / is 0700 root: /tmp is 1777)
COLS, ROWS = 120, 40
_TTY_ENV = {"TERM": "xterm-256color", "SHELL": "/bin/bash"}
_NAMED = re.compile(
    r"<((?:[CMS]-)*(?:Enter|Tab|Escape|BSpace|Space|Up|Down|Left|Right|Home|End|PageUp|PageDown"
    r"|DC|IC|F[1-9]|F1[0-2]|[a-z0-9]|[\[\]\\/]))>"
)
_START = (
    f'tmux -f /dev/null -S {SOCK_MOUNT}/sock new-session -d -s main -x {COLS} -y {ROWS} "$SHELL" && '
    f"while tmux -S {SOCK_MOUNT}/sock has-session -t main 2>/dev/null; do sleep 0.5; done"
)
# positional arguments: wait_s, then items "k:<name>" or "t:<text>"
_KEYS = (
    'w="$1"; shift; for a in "$@"; do case "$a" in '
    f'k:*) tmux -S {SOCK_MOUNT}/sock send-keys -t main -- "${{a#k:}}" || exit 3;; '
    f't:*) tmux -S {SOCK_MOUNT}/sock send-keys -t main -l -- "${{a#t:}}" || exit 3;; '
    'esac; done; sleep "$w"; '
    f"exec tmux -S {SOCK_MOUNT}/sock capture-pane -p -t main"
)


def key_args(keys: list[str]) -> list[str]:
    """``<Name>`` items (a fixed grammar) become named keys, everything else literal text."""
    out = []
    for k in keys:
        m = _NAMED.fullmatch(k)
        out.append(f"k:{m.group(1)}" if m else f"t:{k}")
    return out


@dataclass
class Tty:
    """One session's terminal: the server jail's thread and its socket tmpfs."""

    sock_dir: Path | None  # None: a container's (its bind at SOCK_MOUNT)
    jail: str = ""  # the server jail's name: its cgroups' name (freezer.py holds them still)
    cancel: Cancel = field(default_factory=Cancel)
    thread: threading.Thread | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    last_words: str = ""  # the server jail's output when it ended

    @property
    def alive(self) -> bool:
        return self.thread is not None and not self.ended.is_set()


class TtyHost:
    """Starts, drives and stops the terminals of a :class:`SessionManager`'s sessions."""

    def __init__(self, ctx: object) -> None:
        self.ctx = ctx

    def _spec(
        self, ws: Path, uid: int, limits: Limits, sock: Path, env: Provisioned | None,
        argv: list[str], timeout_s: float, network: bool,
    ) -> JailSpec:  # fmt: skip
        ro: list[tuple[str, str]] = []
        rw = [(str(sock), SOCK_MOUNT)]
        jenv = {"TERM": "xterm-256color", "HOME": "/tmp", "SHELL": "/bin/bash"}
        cwd = WORKSPACE
        if env is not None:
            ero, erw = env.binds(ws)
            ro, rw, cwd = ero, rw + erw, env.spec.workdir
            jenv = env.jail_env() | jenv
        return JailSpec(
            argv=argv, workspace=ws, uid=uid, limits=limits, timeout_s=timeout_s,
            network=network, cwd=cwd, ro_binds=ro, binds=rw, env=jenv,
            name=f"tty-{uuid.uuid4().hex[:12]}", isolation=self.ctx.isolation,  # type: ignore[attr-defined]
        )  # fmt: skip

    def ensure(
        self, tty: Tty | None, sid: str, ws: Path, uid: int, limits: Limits,
        env: Provisioned | None, network: bool, proxy: egress.Proxy | None = None,
    ) -> tuple[Tty, bool]:  # fmt: skip
        """The session's live terminal, started if there is none (True: started now)."""
        if tty is not None and tty.alive:
            return tty, False
        if self.ctx.isolation != "bwrap":  # type: ignore[attr-defined]
            raise ValueError("the interactive terminal needs the bwrap isolation backend")
        if tty is not None:
            self.stop(tty)
        sock = self.ctx.workspaces.create(f"t-{sid[:16]}-{uuid.uuid4().hex[:6]}", uid, 1, 64)  # type: ignore[attr-defined]
        spec = self._spec(
            ws, uid, limits, sock, env, ["/bin/sh", "-c", _START], MAX_LIFE_S, network
        )
        if proxy is not None:  # the shell and what it starts: the registries only
            egress.attach(spec, proxy, sys.executable)
        t = Tty(sock_dir=sock, jail=spec.name)

        def serve() -> None:
            try:
                o = jail_run(spec, self.ctx.probe, t.cancel)  # type: ignore[attr-defined]
                t.last_words = f"exit {o.exit_code}: {(o.stderr or o.stdout).strip()[-300:]}"
            finally:
                t.ended.set()

        t.thread = threading.Thread(target=serve, name=f"tty-{sid[:8]}", daemon=True)
        t.thread.start()
        return t, True

    def keys(
        self, t: Tty, ws: Path, uid: int, limits: Limits, env: Provisioned | None,
        req: TtyRequest, started: bool,
    ) -> TtyResult:  # fmt: skip
        """Send ``req.keys``, wait, return the screen (retrying while a new server starts)."""
        argv = ["/bin/sh", "-c", _KEYS, "sh", str(req.wait_s), *key_args(req.keys)]
        small = limits.model_copy(update={"output_bytes": 1 << 20})
        assert t.sock_dir is not None
        spec = self._spec(ws, uid, small, t.sock_dir, env, argv, req.wait_s + 20.0, False)

        def once() -> tuple[int | None, str, str]:
            o = jail_run(spec, self.ctx.probe)  # type: ignore[attr-defined]
            return o.exit_code, o.stdout, o.stderr

        return _screen(t, started, once)

    def ensure_in(self, tty: Tty | None, box: Container, cwd: str,
                  env: dict[str, str]) -> tuple[Tty, bool]:  # fmt: skip
        """``ensure`` in a session's container (layers/container.py): the server is a command
        of the container (its processes among the agent's, as under ``docker exec``), the
        socket in the container's dir bound at SOCK_MOUNT."""
        if tty is not None and tty.alive:
            return tty, False
        if tty is not None:
            self.stop(tty)
        t = Tty(sock_dir=None, jail=f"tty-{uuid.uuid4().hex[:12]}")

        def serve() -> None:
            try:
                o = box.run(["/bin/sh", "-c", _START], cwd, MAX_LIFE_S, env=env | _TTY_ENV,
                            output_cap=1 << 16, name=t.jail, cancel=t.cancel)  # fmt: skip
                t.last_words = f"exit {o.exit_code}: {(o.errput or o.output).strip()[-300:]}"
            except Exception as e:  # reported on the next keystroke call
                t.last_words = str(e)
            finally:
                t.ended.set()

        t.thread = threading.Thread(target=serve, name=f"tty-{t.jail}", daemon=True)
        t.thread.start()
        return t, True

    def keys_in(self, t: Tty, box: Container, cwd: str, env: dict[str, str], req: TtyRequest,
                started: bool) -> TtyResult:  # fmt: skip
        """``keys`` through a command of the session's container."""
        argv = ["/bin/sh", "-c", _KEYS, "sh", str(req.wait_s), *key_args(req.keys)]

        def once() -> tuple[int | None, str, str]:
            o = box.run(argv, cwd, req.wait_s + 20.0, env=env | _TTY_ENV, output_cap=1 << 20)
            return o.exit_code, o.output, o.errput

        return _screen(t, started, once)

    def stop(self, t: Tty) -> None:
        """Kill the server jail (its pid namespace, so every pane process) and free the socket."""
        t.cancel.set()
        if t.thread is not None:
            t.thread.join(timeout=30)
        if t.sock_dir is not None:
            self.ctx.workspaces.destroy(t.sock_dir)  # type: ignore[attr-defined]


def _screen(t: Tty, started: bool, once: Callable[[], tuple[int | None, str, str]]) -> TtyResult:
    """Run the keystroke call ``once`` (exit code, stdout, stderr) — retried while a server
    that started now comes up — and return the screen, or why the terminal is not running."""
    said = ""
    for _ in range(40 if started else 1):
        code, out, err = once()
        if code == 0:
            return TtyResult(screen=out.rstrip("\n"), alive=t.alive, started=started)
        said = (err or out).strip()[-300:]
        if not started or t.ended.is_set():
            break
        t.ended.wait(0.1)
    return _not_running(t.last_words or said, started)


def _not_running(detail: str, started: bool) -> TtyResult:
    return TtyResult(
        screen=f"(the terminal is not running: {detail or 'it exited'}; the next call "
        "starts a new one)",
        alive=False,
        started=started,
    )
