"""A session's desktop: Xvfb, a window manager and applications in a long-lived jail.

Built like the session's terminal (tty.py), with a display instead of a tmux pane:

* **The display jail** (one per session, started by ``start``): the session's usual bwrap jail
  (its uid, workspace, no network unless the session has it, its memory / pids cgroup limits and rlimits) running Xvfb
  (``-nolisten tcp``: its only socket is a file), openbox, the applications the task opens, and
  a loop that starts what later calls hand it through a spool directory. Nothing of the host's
  X is reachable: there is none in the jail, and the display is the jail's own.
* **The socket** lives in a per-session tmpfs owned by the session's uid, mounted at
  ``/tmp/.X11-unix`` in the display jail and in each step jail, never in the workspace.
* **Each step** is a short jail of the same uid with that mount, running the fixed script
  ``inside/desktop_step.py``: xdotool invocations rendered from *validated* actions
  (actions.py, pyautogui.py; arguments, never a shell line), then the screenshot (Pillow's X
  grab, PNG) and the window list. The service only parses its JSON output (capped).

The desktop dies with the session (deleted, reaped, or the service shutting down): the display
jail's pid namespace takes every application with it.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.sandbox.desktop.actions import END_TYPES, InvalidAction
from dockyard.sandbox.desktop.actions import xdotool_argv as render
from dockyard.sandbox.desktop.pyautogui import validate
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep, Window
from dockyard.sandbox.jail import Cancel, JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.models import Limits
from dockyard.sandbox.toolchain import RUNNER_MOUNT, WORKSPACE, python_executable

MAX_LIFE_S = 86_400.0
X_MOUNT = "/tmp/.X11-unix"
STEP_OUTPUT_BYTES = 32 << 20  # a base64 PNG of a 4K screen fits
_SERVER = (
    f'W="$1"; H="$2"; WM="$3"; shift 3; mkdir -p {X_MOUNT}/launch || exit 3; '
    "Xvfb :0 -screen 0 ${W}x${H}x24 -nolisten tcp -noreset >/tmp/xvfb.log 2>&1 & X=$!; "
    f"i=0; while [ ! -S {X_MOUNT}/X0 ]; do i=$((i+1)); [ $i -gt 200 ] && {{ cat /tmp/xvfb.log >&2; "
    "exit 4; }; sleep 0.05; done; "
    '[ "$WM" = 1 ] && { openbox --sm-disable </dev/null >/tmp/wm.log 2>&1 & '
    # applications mapped before the window manager is up can stay unmapped: wait for its theme
    "i=0; until xprop -root _OB_THEME 2>/dev/null | grep -q '='; do "
    "i=$((i+1)); [ $i -gt 200 ] && break; sleep 0.05; done; }; "
    'for c in "$@"; do sh -c "$c" </dev/null >/dev/null 2>&1 & done; '
    f"touch {X_MOUNT}/ready; "
    f'while kill -0 $X 2>/dev/null; do for f in {X_MOUNT}/launch/*.sh; do [ -f "$f" ] || continue; '
    'mv "$f" "$f.run" && { sh "$f.run" </dev/null >/dev/null 2>&1 & }; done; sleep 0.1; done'
)


@dataclass
class Desktop:
    """One session's display jail: its thread, its socket tmpfs and its screen."""

    spec: DesktopSpec
    sock_dir: Path
    host: DesktopHost
    jail: str = ""
    network: bool = False  # the session's: only a session made with network=True has one
    cancel: Cancel = field(default_factory=Cancel)
    thread: threading.Thread | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    last_words: str = ""

    @property
    def alive(self) -> bool:
        return self.thread is not None and not self.ended.is_set()

    @property
    def screen(self) -> tuple[int, int]:
        return self.spec.width, self.spec.height

    def stop(self) -> None:
        """Kill the display jail (every application with it) and free the socket tmpfs."""
        self.cancel.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.host.ctx.workspaces.destroy(self.sock_dir)


class DesktopHost:
    """Starts, drives and stops the desktops of a session manager's sessions."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def _spec(
        self, ws: Path, uid: int, limits: Limits, sock: Path, argv: list[str], timeout_s: float,
        env: Any = None, network: bool = False,
    ) -> JailSpec:  # fmt: skip
        ro: list[tuple[str, str]] = []
        rw = [(str(sock), X_MOUNT)]
        jenv = {"DISPLAY": ":0", "HOME": "/tmp", "SHELL": "/bin/sh"}
        if env is not None:  # a provisioned environment: its prefix and variables too
            ero, erw = env.binds(ws)
            ro, rw, jenv = ero, rw + erw, env.jail_env() | jenv
        return JailSpec(
            argv=argv, workspace=ws, uid=uid, limits=limits, timeout_s=timeout_s, network=network,
            cwd=WORKSPACE, ro_binds=ro, binds=rw, env=jenv,
            name=f"dsk-{uuid.uuid4().hex[:12]}", isolation=self.ctx.isolation,
        )  # fmt: skip

    def start(
        self, sid: str, ws: Path, uid: int, limits: Limits, spec: DesktopSpec, env: Any = None,
        network: bool = False,
    ) -> Desktop:  # fmt: skip
        if self.ctx.isolation != "bwrap":
            raise ValueError("the desktop needs the bwrap isolation backend")
        sock = self.ctx.workspaces.create(f"d-{sid[:16]}-{uuid.uuid4().hex[:6]}", uid, 64, 256)
        argv = ["/bin/sh", "-c", _SERVER, "sh", str(spec.width), str(spec.height)]
        argv += ["1" if spec.window_manager else "0", *spec.launch]
        jspec = self._spec(ws, uid, limits, sock, argv, MAX_LIFE_S, env, network)
        d = Desktop(spec=spec, sock_dir=sock, host=self, jail=jspec.name, network=network)

        def serve() -> None:
            try:
                o = jail_run(jspec, self.ctx.probe, d.cancel)
                d.last_words = f"exit {o.exit_code}: {(o.stderr or o.stdout).strip()[-300:]}"
            finally:
                d.ended.set()

        d.thread = threading.Thread(target=serve, name=f"desktop-{sid[:8]}", daemon=True)
        d.thread.start()
        return d

    def step(
        self, d: Desktop, ws: Path, uid: int, limits: Limits, step: DesktopStep,
        started: bool = False, env: Any = None,
    ) -> DesktopObservation:  # fmt: skip
        """Validate and perform ``step`` on ``d``, then observe it (``started``: the display jail
        is new, the step first waits for it to be ready)."""
        obs = DesktopObservation(screen=d.screen, started=started)
        try:
            acts = validate(step, d.screen)
        except InvalidAction as e:
            acts, obs.invalid = [], str(e)
        cmds: list[Any] = []
        for a in acts:
            cmds += [{"sleep": a.seconds}] if a.type == "WAIT" else render(a)
        req = {
            "launch": step.launch, "cmds": cmds, "wait": step.wait_s, "shot": step.screenshot,
            "size": step.size, "windows": step.windows, "await_ready": started,
        }  # fmt: skip
        argv = [python_executable(), "-I", "-S", "-B", f"{RUNNER_MOUNT}/desktop_step.py"]
        small = limits.model_copy(update={"output_bytes": STEP_OUTPUT_BYTES})
        typing_s = 0.02 * sum(len(a.text) for a in acts)  # xdotool types at 12 ms a key
        timeout = 30.0 + step.wait_s + sum(a.seconds for a in acts) + 0.05 * len(cmds) + typing_s
        jspec = self._spec(
            ws, uid, small, d.sock_dir, [*argv, json.dumps(req)], timeout, env, d.network
        )
        o = jail_run(jspec, self.ctx.probe)
        if o.exit_code != 0 or o.stdout_truncated:
            said = d.last_words or (o.stderr or o.stdout).strip()[-500:]
            raise DesktopDown(f"the desktop did not answer ({said}); if its display exited, "
                              "start it again (POST .../desktop)")  # fmt: skip
        try:
            r = json.loads(o.stdout)
            obs.png_b64, obs.active_title = str(r["png_b64"]), str(r["active_title"])
            obs.errors = [str(e) for e in r["errors"]]
            obs.size = tuple(r["size"]) if r["size"] else None
            obs.windows = [Window.model_validate(w) for w in r["windows"]]
        except (ValueError, KeyError, TypeError) as e:
            raise DesktopDown(
                f"the step's output did not parse ({e!r}); if the display exited, start it again"
            ) from e
        obs.actions = [a.to_dict() for a in acts]
        obs.ended = acts[-1].type if acts and acts[-1].type in END_TYPES else None
        obs.alive = d.alive
        return obs


class DesktopDown(RuntimeError):
    """The desktop's display is not running (it exited, or never started)."""
