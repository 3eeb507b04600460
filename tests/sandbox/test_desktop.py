"""A session's desktop against the real service: Xvfb + openbox + a Tk app in the session's
jail, driven with validated actions (xdotool), observed as PNG screenshots and a window list.

Needs Xvfb, openbox, xdotool, wish and xprop (``.ci/run`` installs them). One desktop for the
module: each step costs a jail launch (about 0.3 s idle, seconds on a loaded 2-core machine).
"""

from __future__ import annotations

import base64
import io
import shutil
import time

import pytest
from PIL import Image

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.desktop.backend import DesktopError, SandboxDesktop
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep
from dockyard.sandbox.testing import sandbox_processes

pytestmark = pytest.mark.slow

# a Tk window at a fixed place: a button that writes its name, an entry that writes its text
APP = r"""
wm title . "Form"
wm geometry . +40+40
button .ok -text "OK" -width 8 -command {set f [open /workspace/clicked.txt w]; puts -nonewline $f OK; close $f}
entry .e -width 16
bind .e <Return> {set f [open /workspace/typed.txt w]; puts -nonewline $f [.e get]; close $f}
pack .ok .e -padx 10 -pady 10
focus -force .e
"""


def _need_tools() -> None:
    missing = [t for t in ("Xvfb", "openbox", "xdotool", "wish", "xprop") if not shutil.which(t)]
    if missing:
        pytest.fail(
            f"{missing} not installed: apt-get install -y xvfb openbox xdotool tk x11-utils"
        )


@pytest.fixture(scope="module")
def desk(sandbox: SandboxClient):
    _need_tools()
    sid = sandbox.create_session({"limits": {"memory_mb": 768, "pids": 128}})
    sandbox.put_file(sid, "app.tcl", APP)
    d = SandboxDesktop(sandbox, sid)
    first = d.start(DesktopSpec(width=320, height=240, launch=["wish /workspace/app.tcl"]))
    yield sandbox, sid, d, first
    sandbox.delete_session(sid)


def _form(d: SandboxDesktop) -> tuple[DesktopObservation, dict]:
    for _ in range(60):  # Tk's first window can take seconds on a loaded machine
        obs = d.step(DesktopStep(wait_s=0.2))
        wins = [w for w in obs.windows if w.title == "Form"]
        if wins:
            return obs, wins[0].model_dump()
    pytest.fail(f"the Tk window never appeared: {obs.windows}")


def test_start_screenshot_png_of_the_screen(desk) -> None:
    _, _, d, first = desk
    assert first.started
    assert first.alive
    assert first.screen == (320, 240)
    im = Image.open(io.BytesIO(base64.b64decode(first.png_b64)))
    assert im.format == "PNG"
    assert im.size == (320, 240)
    small = d.step(DesktopStep(size=(160, 120), windows=False))
    assert Image.open(io.BytesIO(base64.b64decode(small.png_b64))).size == (160, 120)


def test_click_and_type_reach_the_app(desk) -> None:
    sandbox, sid, d, _ = desk
    obs, w = _form(d)
    assert obs.active_title == "Form"
    before = Image.open(io.BytesIO(base64.b64decode(obs.png_b64))).convert("L")
    assert before.getextrema()[1] > 0  # the window is drawn: not a black screen
    # the button is the top widget of the window: its centre is ~ (x + w/2, y + 20)
    code = f"import pyautogui\npyautogui.click({w['x'] + w['width'] // 2}, {w['y'] + 22})"
    obs = d.step(DesktopStep(code=code, wait_s=0.5))
    assert obs.invalid is None
    assert obs.errors == []
    bx, by = w["x"] + w["width"] // 2, w["y"] + 22
    params = {"x": bx, "y": by, "button": "left", "num_clicks": 1}
    assert obs.actions == [{"action_type": "CLICK", "parameters": params}]
    ex = w["x"] + w["width"] // 2
    ey = w["y"] + w["height"] - 20  # the entry is the bottom widget
    acts = [
        {"action_type": "CLICK", "parameters": {"x": ex, "y": ey}},
        {"action_type": "TYPING", "parameters": {"text": "hello desk"}},
        {"action_type": "PRESS", "parameters": {"key": "enter"}},
    ]
    obs = d.step(DesktopStep(actions=acts, wait_s=0.5))
    assert obs.invalid is None, obs.invalid
    for _ in range(20):
        try:
            if sandbox.get_file(sid, "typed.txt") == b"hello desk":
                break
        except Exception:
            pass
        time.sleep(0.25)
    assert sandbox.get_file(sid, "clicked.txt") == b"OK"
    assert sandbox.get_file(sid, "typed.txt") == b"hello desk"


def test_invalid_actions_are_refused_whole(desk) -> None:
    sandbox, sid, d, _ = desk
    cases = [
        ({"code": "import os; os.system('touch /workspace/pwned')"}, "only pyautogui calls"),
        ({"code": "pyautogui.click(x, 3)"}, "literals"),
        ({"code": "pyautogui.write('x'); pyautogui.click(999, 10)"}, "off the 320x240 screen"),
        (
            {"actions": [{"action_type": "PRESS", "parameters": {"key": "nosuchkey"}}]},
            "unknown key",
        ),
        ({"actions": [{"action_type": "LAUNCH_ROCKET"}]}, "unknown action_type"),
        ({"actions": ["DONE", {"action_type": "WAIT"}]}, "last action"),
    ]
    for body, why in cases:
        obs = d.step(DesktopStep(**body, screenshot=False, windows=False))
        assert obs.invalid is not None, body
        assert why in obs.invalid, (body, obs.invalid)
        assert obs.actions == []  # nothing of a refused step runs
    with pytest.raises(SandboxRequestError, match="no file"):
        sandbox.get_file(sid, "pwned")
    assert d.step(DesktopStep(code="DONE", screenshot=False)).ended == "DONE"


def test_desktop_is_jailed_and_dies_with_the_session(sandbox: SandboxClient) -> None:
    _need_tools()
    sid = sandbox.create_session({})
    d = SandboxDesktop(sandbox, sid)
    probe = "(id -u; awk 'NR > 2 {print $1}' /proc/net/dev; echo $DISPLAY) > /workspace/who.txt"
    d.start(DesktopSpec(width=200, height=150, window_manager=False, launch=[probe]))
    for _ in range(40):
        try:
            who = sandbox.get_file(sid, "who.txt").decode().split()
            break
        except Exception:
            time.sleep(0.25)
    uid, *rest = who
    assert int(uid) >= 200_000  # the session's own unprivileged uid, never root
    assert rest == ["lo:", ":0"]  # no network but loopback; its own display
    mine = "Xvfb :0 -screen 0 200x150x24"
    assert any(mine in cmd for _, _, cmd in sandbox_processes())
    sandbox.delete_session(sid)
    deadline = time.monotonic() + 10
    while any(mine in cmd for _, _, cmd in sandbox_processes()):
        assert time.monotonic() < deadline, "the display outlived its session"
        time.sleep(0.2)
    with pytest.raises(DesktopError) as e:
        SandboxDesktop(sandbox, sid).step(DesktopStep())
    assert e.value.status == 404


def test_a_display_the_agent_kills_is_a_409_and_restarts(sandbox: SandboxClient) -> None:
    _need_tools()
    sid = sandbox.create_session({})
    try:
        d = SandboxDesktop(sandbox, sid)
        d.start(DesktopSpec(width=160, height=120, window_manager=False))
        d.step(DesktopStep(launch=["pkill -x Xvfb"], screenshot=False))
        deadline = time.monotonic() + 20
        err = None
        while err is None:  # the display jail notices its X server is gone and ends
            assert time.monotonic() < deadline, "the desktop never noticed its display died"
            try:
                d.step(DesktopStep(screenshot=False, windows=False))
                time.sleep(0.3)
            except DesktopError as e:
                err = e
        assert err.status == 409
        assert "start it again" in str(err.detail)
        again = d.start(DesktopSpec(width=160, height=120, window_manager=False))
        assert again.started
        assert again.screen == (160, 120)
        assert sandbox.exec(sid, "echo still here").stdout == "still here\n"
    finally:
        sandbox.delete_session(sid)
