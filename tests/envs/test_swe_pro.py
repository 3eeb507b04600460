"""SWE-bench Pro's own fields, on the shipped Pro-format fixture (examples/data/swe_pro, written
in Pro's published shape): its Dockerfiles become the layered builder's steps (what cannot run is
refused when the file is loaded, naming the line), ``before_repo_set_cmd`` is honoured,
``selected_test_files_to_run`` decides which tests run, ``requirements`` / ``interface`` reach
the prompt. The fixture validating in the real sandbox is test_swe_provision.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dockyard.envs.swe import logverdict
from dockyard.envs.swe.agent import SweAgentEnvironment
from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.data import load_swebench_jsonl
from dockyard.envs.swe.env import SweEnvironment, task_setup_command
from dockyard.envs.swe.pro import before_repo_set, pro_image, selected_tests
from dockyard.envs.swe.records import from_record
from dockyard.envs.swe.specs import EnvSetup

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "data" / "swe_pro" / "instances.jsonl"


def _records() -> list[dict]:
    return [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.strip()]


def _write(tmp_path: Path, rec: dict) -> Path:
    p = tmp_path / "pro.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    return p


def test_dockerfiles_become_the_builders_steps():
    rec = _records()[0]
    img = pro_image(from_record(rec))
    assert img is not None
    base, inst = img.stages
    assert (base["name"], base["base"]) == ("base", "python:bookworm")  # 3.11 -> bookworm
    assert base["steps"][:2] == [{"run": "mkdir /app"}, {"workdir": "/app"}]
    assert base["steps"][2]["run"].startswith("apt-get update && apt-get install -y")
    # the clone is the task's repository, at the commit the Dockerfile checks out
    assert base["steps"][3] == {"repository": {"dest": "/app", "commit": rec["base_commit"]}}
    assert inst["base"] == "stage:base"
    assert inst["steps"] == [
        {"env": {"PYTEST_ADDOPTS": "--tb=short -v"}}
    ]  # the reset script: dropped
    assert any("resets the repository" in n for n in img.notes), img.notes
    assert any("ENTRYPOINT ignored" in n for n in img.notes), img.notes


@pytest.mark.parametrize(
    ("field", "edit", "line", "why"),
    [
        ("base_dockerfile", ("FROM python:3.11-slim", "FROM golang:1.24"), 1, "no Debian root"),
        (
            "base_dockerfile",
            (
                "RUN git checkout",
                "RUN curl -fsSL https://deb.nodesource.com/setup_16.x | bash -\nRUN git checkout",
            ),
            12,
            "deb.nodesource.com",
        ),
        ("base_dockerfile", ("WORKDIR /app", "WORKDIR /app\nCOPY . /app"), 6, "no build context"),
        (
            "instance_dockerfile",
            ("ENV PYTEST", "RUN git submodule update --init\nENV PYTEST"),
            3,
            "git host",
        ),
    ],
)
def test_what_cannot_run_is_refused_at_load_naming_the_line(tmp_path, field, edit, line, why):
    rec = _records()[0]
    rec[field] = rec[field].replace(*edit, 1)
    with pytest.raises(ValueError, match=rf"{field} line {line}: .*{why}") as e:
        load_swebench_jsonl(_write(tmp_path, rec))
    assert f"{FIXTURE.name}" not in str(e.value)  # the loaded file and its line are named
    assert "pro.jsonl:1" in str(e.value)
    assert load_swebench_jsonl(_write(tmp_path, rec), skip_refused=True) == []


def test_before_repo_set_cmd_is_honoured():
    rec = _records()[0]
    inst = from_record(rec)
    assert before_repo_set(inst) == []  # reset to base + the held-out test, which test_patch has
    task = inst.to_task()
    assert task_setup_command(None, task) is None
    # a line of another form runs in the repository before the patch, in order
    rec["before_repo_set_cmd"] += "\ntouch .pro-ready"
    assert task_setup_command(None, from_record(rec).to_task()) == "touch .pro-ready"
    # a test file the test_patch does not hold cannot be restored: refused, naming the line
    rec["before_repo_set_cmd"] = rec["before_repo_set_cmd"].replace(
        "-- tests/test_tinycalc.py", "-- tests/test_other.py"
    )
    with pytest.raises(StepRefused, match=r"before_repo_set_cmd line 4: restores \['tests/test_other.py'\]"):  # fmt: skip
        before_repo_set(from_record(rec))


def test_selected_test_files_select_the_tests(tmp_path):
    rec = _records()[0]
    inst = from_record(rec)
    assert selected_tests(inst) == ["tests/test_tinycalc.py"]
    # a log-parsed test command runs the selected files, not every file the ids name
    setup = EnvSetup(rec["repo"], "*", "python -m unittest", log_parser="parse_log_pytest")
    task = {**inst.to_task(), "selected_test_files_to_run": ["tests/test_tinycalc.py", "tests/test_more.py"]}  # fmt: skip
    assert (
        logverdict.test_command(setup, task)
        == "python -m unittest tests/test_tinycalc.py tests/test_more.py"
    )
    # an id in no selected file would never run under Pro's harness: refused at load
    rec["selected_test_files_to_run"] = "['tests/test_other.py']"
    with pytest.raises(ValueError, match="in none of selected_test_files_to_run"):
        load_swebench_jsonl(_write(tmp_path, rec))


def test_requirements_and_interface_reach_the_prompt():
    task = load_swebench_jsonl(FIXTURE)[0]
    for env in (
        SweEnvironment("http://127.0.0.1:9"),
        SweAgentEnvironment("http://127.0.0.1:9", tools=["bash", "submit"]),
    ):
        user = env.prompt(task)[-1]["content"]
        assert "<requirements>" in user, user
        assert task["requirements"] in user, user
        assert "<interface>" in user, user
        assert task["interface"] in user, user
    plain = {k: v for k, v in task.items() if k not in ("requirements", "interface")}
    assert "<requirements>" not in SweEnvironment("http://127.0.0.1:9").prompt(plain)[-1]["content"]
