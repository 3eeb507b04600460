"""The VNC guest backend against a real VNC server: x11vnc attached to a sandbox session's
desktop (a session with network, so x11vnc's loopback port is reachable from here). The same
validated actions reach the same Tk app as through the xdotool backend; the framebuffer is the
screenshot.
"""

from __future__ import annotations

import base64
import io
import shutil
import socket
import time

import pytest
from PIL import Image

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.desktop.backend import SandboxDesktop
from dockyard.sandbox.desktop.wire import DesktopSpec, DesktopStep

pytestmark = pytest.mark.slow
vnc = pytest.importorskip("dockyard.sandbox.desktop.vnc")

APP = r"""
wm title . "Form"
wm geometry . 200x120+0+0
button .ok -text "OK" -command {set f [open /workspace/clicked.txt w]; puts -nonewline $f OK; close $f}
entry .e -width 12
bind .e <Return> {set f [open /workspace/typed.txt w]; puts -nonewline $f [.e get]; close $f}
place .ok -x 100 -y 30 -anchor center
place .e -x 100 -y 80 -anchor center
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_file(sandbox: SandboxClient, sid: str, path: str) -> bytes | None:
    for _ in range(40):
        try:
            return sandbox.get_file(sid, path)
        except Exception:
            time.sleep(0.25)
    return None


def test_vnc_backend_drives_a_sandboxed_desktop(net_sandbox: SandboxClient) -> None:
    if not (shutil.which("x11vnc") and shutil.which("Xvfb")):
        pytest.fail("x11vnc / xvfb not installed: apt-get install -y x11vnc xvfb")
    sandbox = net_sandbox
    sid = sandbox.create_session({"network": True})
    try:
        sandbox.put_file(sid, "app.tcl", APP)
        port = _free_port()
        server = f"x11vnc -display :0 -rfbport {port} -localhost -nopw -forever -shared -quiet"
        desk = SandboxDesktop(sandbox, sid)
        desk.start(DesktopSpec(width=320, height=240, launch=["wish /workspace/app.tcl", server]))
        for _ in range(80):
            obs = desk.step(DesktopStep(wait_s=0.2, screenshot=False))
            form = [w for w in obs.windows if w.title == "Form"]
            if form:
                break
        else:
            pytest.fail(f"no Tk window: {obs.windows}")
        w = form[0]
        for _ in range(80):  # x11vnc listening?
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.25)
        guest = vnc.VncDesktop("127.0.0.1", port)
        try:
            first = guest.start(DesktopSpec())
            assert first.screen == (320, 240)
            im = Image.open(io.BytesIO(base64.b64decode(first.png_b64)))
            assert im.size == (320, 240)
            assert im.convert("L").getextrema()[1] > 0  # the desktop, not a black frame
            # Two steps, as an agent acts: the entry takes the focus when Tk has handled the
            # click, which keys sent in the same breath can overtake (first letters lost).
            code = f"pyautogui.click({w.x + 100}, {w.y + 30})\npyautogui.click({w.x + 100}, {w.y + 80})"
            obs = guest.step(DesktopStep(code=code, wait_s=0.5, screenshot=False))
            assert obs.invalid is None
            assert [a["action_type"] for a in obs.actions] == ["CLICK", "CLICK"]
            code = "pyautogui.write('Vnc 42')\npyautogui.press('enter')"
            obs = guest.step(DesktopStep(code=code, wait_s=0.5, size=(160, 120)))
            assert obs.invalid is None
            assert obs.size == (160, 120)
            assert [a["action_type"] for a in obs.actions] == ["TYPING", "PRESS"]
            bad = guest.step(DesktopStep(code="import os", screenshot=False))
            assert "only pyautogui calls" in (bad.invalid or "")
            with pytest.raises(ValueError, match="cannot launch"):
                guest.step(DesktopStep(launch=["xterm"]))
        finally:
            guest.close()
        assert _wait_file(sandbox, sid, "clicked.txt") == b"OK"
        assert _wait_file(sandbox, sid, "typed.txt") == b"Vnc 42"
    finally:
        sandbox.delete_session(sid)
