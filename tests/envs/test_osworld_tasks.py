"""OSWorld's task layout: what loads, what is refused (with its reason), the evaluator's
metrics and getters on fakes, the toy family and the oracle's window references (no sandbox)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dockyard.envs.osworld.agents import MissingWindow, OracleAgent, resolve
from dockyard.envs.osworld.data import osworld_dataset, osworld_toy_dataset
from dockyard.envs.osworld.env import extract_code
from dockyard.envs.osworld.evaluators import evaluate
from dockyard.envs.osworld.guestpath import workspace_path
from dockyard.envs.osworld.tasks import load_tasks
from dockyard.envs.osworld.toy import COLOURS, DATA, toy_tasks
from dockyard.sandbox.desktop.pyautogui import parse_code
from dockyard.sandbox.desktop.wire import DesktopObservation, Window

OK_EVAL = {
    "func": "exact_match",
    "result": {"type": "vm_file", "path": "/home/user/a.txt"},
    "expected": {"type": "rule", "rules": {"expected": "x"}},
}


def _write(root: Path, domain: str, task: dict) -> None:
    (root / "examples" / domain).mkdir(parents=True, exist_ok=True)
    (root / "examples" / domain / f"{task['id']}.json").write_text(json.dumps(task))


def test_shipped_tasks_all_load_with_oracles() -> None:
    tasks, refused = load_tasks(DATA)
    assert refused == []
    assert len(tasks) >= 20
    assert len({t.domain for t in tasks}) >= 4
    for t in tasks:
        assert t.oracle, t.id
        for step in t.oracle:  # every oracle step is valid pyautogui once windows resolve
            if "{" not in step:
                parse_code(step, (640, 480))
    assert len(osworld_dataset("train")) == len(tasks)


def test_refusals_name_the_reason(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "ok.txt").write_text("hi")
    bad = {
        "chrome": ([{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["x"]}}], OK_EVAL),
        "net": (
            [{"type": "download", "parameters": {"files": [{"url": "https://x/y", "path": "y"}]}}],
            OK_EVAL,
        ),
        "escape": (
            [
                {
                    "type": "download",
                    "parameters": {"files": [{"url": "../../etc/passwd", "path": "p"}]},
                }
            ],
            OK_EVAL,
        ),
        "outside": ([], {**OK_EVAL, "result": {"type": "vm_file", "path": "/etc/shadow"}}),
        "metric": ([], {**OK_EVAL, "func": "compare_pptx_files"}),
        "getter": ([], {**OK_EVAL, "result": {"type": "accessibility_tree"}}),
        "post": ([], {**OK_EVAL, "postconfig": [{"type": "sleep", "parameters": {}}]}),
        "arity": ([], {**OK_EVAL, "func": ["exact_match", "exact_match"]}),
    }
    for tid, (config, ev) in bad.items():
        _write(tmp_path, "d", {"id": tid, "instruction": "do", "config": config, "evaluator": ev})
    good = [
        {"type": "download", "parameters": {"files": [{"url": "files/ok.txt", "path": "a.txt"}]}}
    ]
    _write(tmp_path, "d", {"id": "good", "instruction": "do", "config": good, "evaluator": OK_EVAL})
    tasks, refused = load_tasks(tmp_path / "examples")
    assert [t.id for t in tasks] == ["good"]
    why = {r.task_id: r.reason for r in refused}
    assert set(why) == set(bad)
    assert "chrome_open_tabs" in why["chrome"]
    assert "network" in why["net"]
    assert "not a file in the task's folder" in why["escape"]
    assert "outside the guest's home" in why["outside"]
    assert "compare_pptx_files" in why["metric"]
    assert "accessibility_tree" in why["getter"]
    assert "postconfig" in why["post"]
    assert "2 metric(s) but 1 result getter(s)" in why["arity"]


def test_guest_paths() -> None:
    assert workspace_path("/home/user/Desktop/a.txt") == "Desktop/a.txt"
    assert workspace_path("/workspace/x") == "x"
    assert workspace_path("rel/y") == "rel/y"
    for bad in ("/etc/passwd", "~/x", "a/../../b", "", None):
        with pytest.raises(ValueError, match="path"):
            workspace_path(bad)


class FakeGuest:
    def __init__(self, files: dict[str, bytes], title: str = "", titles: list[str] = ()):
        self.files, self.title, self.titles = files, title, list(titles)

    async def read_file(self, rel: str) -> bytes | None:
        return self.files.get(rel)

    async def run(self, command: str) -> str:
        return f"ran {command}\n"

    async def window_state(self) -> tuple[str, list[str]]:
        return self.title, self.titles


def _score(ev: dict, guest: FakeGuest, ended: str | None = "DONE") -> float:
    return asyncio.run(evaluate(ev, guest, DATA, ended))


def test_metrics_and_getters() -> None:
    g = FakeGuest({"a.txt": b"x", "s.txt": b"alice\nbob\ncarol\nmallory\n"}, "T", ["logs", "xterm"])
    assert _score(OK_EVAL, g) == 1.0
    assert _score(OK_EVAL, FakeGuest({})) == 0.0  # a missing file is a 0, not an error
    assert _score(OK_EVAL, g, ended="FAIL") == 0.0  # giving up on a feasible task
    sorted_ok = {
        "func": "compare_text_file",
        "result": {"type": "vm_file", "path": "s.txt"},
        "expected": {"type": "local_file", "path": "files/xterm/names_sorted.txt"},
    }
    assert _score(sorted_ok, g) == 1.0
    inc = {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": ["ls", "-a"]},
        "expected": {"type": "rule", "rules": {"include": ["ran ls -a"], "exclude": ["rm"]}},
    }
    assert _score(inc, g) == 1.0
    titles = {
        "func": ["is_in_list", "exact_match"],
        "conj": "and",
        "result": [{"type": "window_titles"}, {"type": "active_window_title"}],
        "expected": [
            {"type": "rule", "rules": {"expected": "logs"}},
            {"type": "rule", "rules": {"expected": "nope"}},
        ],
    }
    assert _score(titles, g) == 0.0
    assert _score({**titles, "conj": "or"}, g) == 1.0
    assert _score({"func": "infeasible"}, g, ended="FAIL") == 1.0
    assert _score({"func": "infeasible"}, g, ended="DONE") == 0.0
    fuzzy = {
        **OK_EVAL,
        "func": "fuzzy_match",
        "expected": {"type": "rule", "rules": {"expected": "xy"}},
    }
    assert 0.0 < _score(fuzzy, g) < 1.0


def test_toy_family_is_deterministic_and_split() -> None:
    a, b = toy_tasks(6, seed=3), toy_tasks(6, seed=3)
    assert a == b
    assert [t["id"].split("-")[1] for t in a] == ["click", "type"] * 3
    train, val = osworld_toy_dataset("train", n=8), osworld_toy_dataset("val", n=8)
    demo = osworld_toy_dataset("demo", n=8)  # the warm start's: not GRPO's training tasks
    layouts = [[t["config"][1]["parameters"]["command"] for t in s] for s in (train, val, demo)]
    assert layouts[0] != layouts[1]
    assert layouts[0] != layouts[2]
    assert layouts[1] != layouts[2]
    with pytest.raises(ValueError, match="splits are train, val, demo"):
        osworld_toy_dataset("test")
    for t in a:  # each oracle clicks the named button's place
        answer = t["evaluator"]["expected"]["rules"]["expected"]
        assert answer in t["instruction"]
        assert t["domain"] == "toy-" + t["id"].split("-")[1]  # held-out success per kind
        if "click" in t["id"]:
            args = t["config"][1]["parameters"]["command"]
            assert set(args[5::3]) <= set(COLOURS)  # painted in their colour: visible when small
            i = args.index(answer)
            x, y = args[i + 1], args[i + 2]
            assert t["oracle"][0] == f"pyautogui.click({{Toy.x+{x}}}, {{Toy.y+{y}}})"


def test_oracle_resolves_windows_and_waits() -> None:
    obs = DesktopObservation(screen=(640, 480), windows=[Window(id=1, title="Toy", x=1, y=20)])
    assert resolve("pyautogui.click({Toy.x+50}, {Toy.y-5})", obs) == "pyautogui.click(51, 15)"
    with pytest.raises(MissingWindow):
        resolve("pyautogui.click({Other.x}, 1)", obs)
    agent = OracleAgent(
        {"id": "t", "oracle": ["pyautogui.click({Late.x}, 1)", "DONE"]}, max_waits=2
    )
    empty = DesktopObservation(screen=(640, 480))
    assert agent.act(empty) == "pyautogui.sleep(0.5)"
    assert agent.act(empty) == "pyautogui.sleep(0.5)"
    with pytest.raises(RuntimeError, match="never appeared"):
        agent.act(empty)


def test_extract_code() -> None:
    assert (
        extract_code("I will click.\n```python\npyautogui.click(1, 2)\n```")
        == "pyautogui.click(1, 2)"
    )
    assert extract_code("  DONE ") == "DONE"
