"""The shipped cleanroom tasks and the judge's scan, without a sandbox."""

from __future__ import annotations

import base64
import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from dockyard.envs.programbench import probe
from dockyard.envs.programbench.env import parse_files
from dockyard.envs.programbench.judge import build_request
from dockyard.envs.programbench.programs import PROGRAMS
from dockyard.envs.programbench.tasks import load_programbench_tasks
from dockyard.envs.registry import load_dataset

REFS = Path(__file__).resolve().parent / "programbench_refs"


def test_shipped_tasks_are_complete():
    tasks = load_programbench_tasks()
    assert [t["name"] for t in tasks] == sorted(p.name for p in PROGRAMS)
    assert len(tasks) >= 15
    assert {t["language"] for t in tasks} == {"c", "python"}
    for t in tasks:
        exe = base64.b64decode(t["executable_b64"])
        assert hashlib.sha256(exe).hexdigest() == t["fingerprint"]["sha256"]
        assert len(t["fingerprint"]["windows"]) >= 10, t["name"]
        assert len(t["tests"]) >= 20
        assert len(t["examples"]) >= 1
        held = {(tuple(c["argv"]), c["stdin"]) for c in t["tests"]}
        assert not held & {(tuple(c["argv"]), c["stdin"]) for c in t["examples"]}
        assert len({c["exit"] for c in t["tests"]}) >= 2, t["name"]  # errors are exercised too
        # what the agent sees: the README and the visible runs, never a held-out output
        shown = t["single_turn_instruction"]
        assert t["readme"] in shown
        assert not any(
            c["stdout"] and repr(c["stdout"]) in shown for c in t["tests"] if len(c["stdout"]) > 30
        )
    assert len(load_dataset("programbench", "train")) == len(tasks)


def test_request_keeps_the_expected_outputs_out_of_the_sandbox():
    task = load_programbench_tasks()[0]
    test_files, ft, ops = build_request(task)
    assert ops[:4] == ["copy", "embedded", "network", "build"]
    assert ops.count("run") == len(task["tests"])
    (name,) = test_files
    assert name.startswith("_dy_cleanroom_")
    assert ft.module == name[:-3]
    assert build_request(task)[1].module != ft.module  # a fresh name every time
    sent = str(test_files) + str([c.args for c in ft.cases])
    for c in task["tests"]:
        if len(c["stdout"]) > 20:
            assert c["stdout"] not in sent


def test_parse_files():
    resp = 'text <file path="a.c">\nint x;\n</file> and <file path="compile.sh">gcc a.c\n</file>'
    assert parse_files(resp) == {"a.c": "int x;\n", "compile.sh": "gcc a.c\n"}


@pytest.fixture(scope="module")
def original() -> tuple[bytes, probe._Scan]:
    task = next(t for t in load_programbench_tasks() if t["name"] == "rot")
    return base64.b64decode(task["executable_b64"]), probe._Scan(task["fingerprint"])


def scan_hex(scan: probe._Scan) -> list[str]:
    return [w.hex() for w in scan.windows]


def _hidden(scan: probe._Scan, data: bytes) -> list[str]:
    return scan.check("f", data)


def test_scan_sees_through_encodings(original):
    exe, scan = original
    # 64 bytes of the program's own code (where the fingerprint has windows; start-up code
    # that every gcc build shares is left out of it on purpose)
    at = next(
        i
        for i in range(256, len(exe), probe.STRIDE)
        if probe.digest(exe[i : i + probe.WINDOW]) in set(scan_hex(scan))
    )
    part = exe[at - 8 : at + 56]
    assert _hidden(scan, exe) == ["copy:f"]
    assert _hidden(scan, b"junk" * 50 + part + b"junk") == ["embedded:f"]
    b64 = base64.encodebytes(b"xy" + exe).decode()  # wrapped at 76 columns, off alignment
    assert _hidden(scan, f'static const char *b = "{b64}";'.encode())
    assert _hidden(scan, ("{" + ", ".join(f"0x{b:02x}" for b in part) + "}").encode())
    assert _hidden(scan, ('b"' + "".join(f"\\x{b:02x}" for b in part) + '"').encode())
    assert _hidden(scan, ("[" + ",".join(str(b) for b in part) + "]").encode())
    assert _hidden(scan, exe.hex().encode())
    assert _hidden(scan, gzip.compress(exe))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_scan_leaves_an_independent_rebuild_alone(original, tmp_path):
    _, scan = original
    out = tmp_path / "alt"
    subprocess.run(["gcc", "-O2", "-o", str(out), str(REFS / "rot_alt.c")], check=True)
    assert _hidden(scan, out.read_bytes()) == []
    assert _hidden(scan, (REFS / "rot.py").read_bytes()) == []
