"""OSWorld's action space and its pyautogui form: validation and xdotool rendering (no X)."""

from __future__ import annotations

import pytest

from dockyard.sandbox.desktop.actions import Action, InvalidAction, parse_action, xdotool_argv
from dockyard.sandbox.desktop.pyautogui import parse_code, validate
from dockyard.sandbox.desktop.wire import DesktopStep

SCREEN = (640, 480)


def _dicts(code: str) -> list[dict]:
    return [a.to_dict() for a in parse_code(code, SCREEN)]


def test_every_action_type_parses_and_renders() -> None:
    cases = {
        "MOVE_TO": ({"x": 5, "y": 6}, [["mousemove", "5", "6"]]),
        "CLICK": (
            {"x": 1, "y": 2, "button": "right", "num_clicks": 2},
            [["mousemove", "1", "2"], ["click", "--repeat", "2", "--delay", "80", "3"]],
        ),
        "MOUSE_DOWN": ({"button": "middle"}, [["mousedown", "2"]]),
        "MOUSE_UP": ({}, [["mouseup", "1"]]),
        "RIGHT_CLICK": ({}, [["click", "--repeat", "1", "--delay", "80", "3"]]),
        "DOUBLE_CLICK": (
            {"x": 3, "y": 4},
            [["mousemove", "3", "4"], ["click", "--repeat", "2", "--delay", "80", "1"]],
        ),
        "DRAG_TO": (
            {"x": 9, "y": 9},
            [["mousedown", "1"], ["mousemove", "9", "9"], ["mouseup", "1"]],
        ),
        "SCROLL": (
            {"dx": -2, "dy": 3},
            [["click", "--repeat", "3", "4"], ["click", "--repeat", "2", "6"]],
        ),
        "TYPING": ({"text": "-rf /"}, [["type", "--delay", "12", "--", "-rf /"]]),
        "PRESS": ({"key": "enter"}, [["key", "--", "Return"]]),
        "KEY_DOWN": ({"key": "shift"}, [["keydown", "--", "Shift_L"]]),
        "KEY_UP": ({"key": ","}, [["keyup", "--", "comma"]]),
        "HOTKEY": ({"keys": ["ctrl", "alt", "t"]}, [["key", "--", "Control_L+Alt_L+t"]]),
        "WAIT": ({"seconds": 0.5}, []),
        "DONE": ({}, []),
        "FAIL": ({}, []),
    }
    for t, (params, argv) in cases.items():
        a = parse_action({"action_type": t, "parameters": params}, SCREEN)
        assert a.type == t
        assert xdotool_argv(a) == argv, t
        assert parse_action(a.to_dict(), SCREEN) == a  # the recorded form round-trips


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"action_type": "CLICK", "parameters": {"x": 640, "y": 0}}, "off the 640x480"),
        ({"action_type": "CLICK", "parameters": {"x": -1, "y": 0}}, "off the"),
        ({"action_type": "CLICK", "parameters": {"x": "1", "y": 0}}, "numbers"),
        ({"action_type": "CLICK", "parameters": {"x": True, "y": 0}}, "numbers"),
        ({"action_type": "CLICK", "parameters": {"button": "left;rm"}}, "button must be"),
        ({"action_type": "CLICK", "parameters": {"num_clicks": 99}}, "num_clicks"),
        ({"action_type": "MOVE_TO", "parameters": {}}, "numbers"),
        ({"action_type": "TYPING", "parameters": {"text": ""}}, "TYPING needs"),
        ({"action_type": "TYPING", "parameters": {"text": "x" * 5000}}, "TYPING needs"),
        ({"action_type": "TYPING", "parameters": {"text": "\x1b[31m"}}, "printable"),
        ({"action_type": "PRESS", "parameters": {"key": "--help"}}, "unknown key"),
        ({"action_type": "HOTKEY", "parameters": {"keys": []}}, "1..4"),
        ({"action_type": "WAIT", "parameters": {"seconds": 600}}, "WAIT seconds"),
        ({"action_type": "SCROLL", "parameters": {"dy": 1000}}, "dy must be"),
        ({"action_type": "EXEC"}, "unknown action_type"),
        ("rm -rf /", "an action is"),
        (42, "an action is"),
    ],
)
def test_invalid_actions_name_the_problem(raw, why) -> None:
    with pytest.raises(InvalidAction, match=why):
        parse_action(raw, SCREEN)


def test_pyautogui_forms() -> None:
    assert _dicts("WAIT") == [{"action_type": "WAIT", "parameters": {"seconds": 1.0}}]
    assert _dicts(" done ") == [{"action_type": "DONE", "parameters": {}}]
    assert _dicts("import pyautogui, time\npyautogui.click(10, 20); time.sleep(0.5)") == [
        {
            "action_type": "CLICK",
            "parameters": {"x": 10, "y": 20, "button": "left", "num_clicks": 1},
        },
        {"action_type": "WAIT", "parameters": {"seconds": 0.5}},
    ]
    assert _dicts("pyautogui.click(x=3, y=4, clicks=2, button='right')")[0]["parameters"] == {
        "x": 3, "y": 4, "button": "right", "num_clicks": 2,
    }  # fmt: skip
    assert _dicts("pyautogui.click((7, 8))")[0]["parameters"]["x"] == 7
    assert [a["action_type"] for a in _dicts("pyautogui.doubleClick(1, 1)")] == ["CLICK"]
    assert _dicts("pyautogui.typewrite('hi', interval=0.1)") == [
        {"action_type": "TYPING", "parameters": {"text": "hi"}}
    ]
    assert [a["parameters"]["key"] for a in _dicts("pyautogui.typewrite(['a', 'enter'])")] == [
        "a",
        "Return",
    ]
    assert _dicts("pyautogui.hotkey('ctrl', 's')") == [
        {"action_type": "HOTKEY", "parameters": {"keys": ["Control_L", "s"]}}
    ]
    assert len(_dicts("pyautogui.press('tab', presses=3)")) == 3
    assert _dicts("pyautogui.scroll(-5, x=10, y=10)") == [
        {"action_type": "MOVE_TO", "parameters": {"x": 10, "y": 10}},
        {"action_type": "SCROLL", "parameters": {"dx": 0, "dy": -5}},
    ]
    assert _dicts("pyautogui.dragTo(30, 40, duration=1)") == [
        {"action_type": "DRAG_TO", "parameters": {"x": 30, "y": 40}}
    ]


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("import os\nos.system('id')", "only pyautogui calls"),
        ("__import__('os').system('id')", "not in the action space"),
        ("pyautogui.click(x, 1)", "literals"),
        ("pyautogui.click(*[1, 2])", "literals"),
        ("for i in range(3): pyautogui.click(1, 1)", "only pyautogui calls"),
        ("x = 1", "only pyautogui calls"),
        ("pyautogui.screenshot()", "not in the action space"),
        ("pyautogui.click(1, 2, 3, 4, 5, 6)", "positional"),
        ("pyautogui.click(1, 2, evil=1)", "no argument 'evil'"),
        ("pyautogui.write()", "needs the argument 'message'"),
        ("pyautogui.click(", "does not parse"),
        ("pyautogui.press('a', presses=1000)", "presses"),
        ("pyautogui.click(1, 1)\n" * 40, "at most 32"),
        ("time.sleep(6); time.sleep(6)", "of waiting per step"),
        (f"pyautogui.write('{'x' * 1500}'); pyautogui.write('{'y' * 1500}')", "typed characters"),
    ],
)
def test_pyautogui_refusals(code, why) -> None:
    with pytest.raises(InvalidAction, match=why):
        validate(DesktopStep(code=code), SCREEN)


def test_action_is_plain_data() -> None:
    assert Action("PRESS", keys=("Return",)).to_dict() == {
        "action_type": "PRESS",
        "parameters": {"key": "Return"},
    }
