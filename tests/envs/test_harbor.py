"""Harbor task directories: the Dockerfile subset, the loader's errors, and — against the real
sandbox service — validation of the shipped tasks (oracle 1, empty agent not), an episode that
drives a TTY program through the keystroke tool, held-out tests and reward-file handling."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dockyard.envs.harbor import HarborEnvironment, HarborFormatError, load_tasks, parse_dockerfile
from dockyard.envs.harbor.tasks import SHIPPED
from dockyard.envs.harbor.validate import report_table, validate_async


def _df(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    p = tmp_path / "Dockerfile"
    p.write_text(text)
    return p


# -- the Dockerfile subset ------------------------------------------------------------------------
def test_common_subset_maps_to_steps(tmp_path):
    p = _df(
        tmp_path,
        "# comment\nFROM python:3.13-slim-bookworm\nARG V=2\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends \\\n    git make \\\n"
        "    && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\nENV MODE=fast PATH=/app/bin:$PATH\n"
        'COPY src/ /app/src/\nCOPY a.txt .\nRUN python -m pip install requests==$V\nCMD ["bash"]\n',
        {"src/x.py": "print(1)\n", "a.txt": "a\n"},
    )
    e = parse_dockerfile(p)
    assert e.workdir == "/app"
    assert e.host_packages == ["git", "make"]
    assert e.env == {"MODE": "fast", "PATH": "/app/bin:${PATH}"}
    kinds = [next(iter(s)) for s in e.steps]
    assert kinds == ["files", "files", "run"]
    assert e.steps[2]["run"] == "pip install requests==2"
    assert e.network


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("FROM python:3.12\nFROM debian\n", 2, "multi-stage"),
        ("FROM alpine:3.19\n", 1, "only Debian"),
        ("FROM ubuntu:22.04\nUSER agent\n", 2, "USER agent"),
        ("FROM ubuntu:22.04\n\nEXPOSE 8080\n", 3, "service"),
        ("FROM ubuntu:22.04\nADD https://x.org/f.tgz /app/\n", 2, "downloading"),
        ("FROM ubuntu:22.04\nRUN apk add curl\n", 2, "package managers"),
        ("FROM ubuntu:22.04\nWORKDIR /app\nCOPY --from=build /x /app/x\n", 3, "multi-stage"),
        ("FROM ubuntu:22.04\nWORKDIR /app\nCOPY a.txt /etc/a.txt\n", 3, "inside the workdir"),
        ("FROM ubuntu:22.04\nWORKDIR /srv/app\n", 2, "top-level"),
        ("FROM ubuntu:22.04\nRUN --mount=type=cache,target=/x true\n", 2, "flags"),
        ("FROM ubuntu:22.04\nENV PATH=/opt/bin\n", 2, "$PATH"),
    ],
)
def test_refused_with_line_and_reason(tmp_path, text, line, reason):
    p = _df(tmp_path, text, {"a.txt": "a"})
    with pytest.raises(HarborFormatError) as e:
        parse_dockerfile(p)
    assert f"{p}:{line}:" in str(e.value)
    assert reason in str(e.value)


def test_copy_cannot_leave_the_context(tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (tmp_path / "secret").write_text("s")
    p = _df(ctx, "FROM ubuntu:22.04\nWORKDIR /app\nCOPY ../secret /app/\n")
    with pytest.raises(HarborFormatError, match="leaves the build context"):
        parse_dockerfile(p)


# -- the loader -----------------------------------------------------------------------------------
def test_shipped_tasks_load():
    tasks = load_tasks(SHIPPED)
    assert len(tasks) >= 30
    # the kinds of work the issue names: text, git, a C build with make, sqlite, python
    # packaging, log analysis, a program driven by keystrokes
    assert {"text-processing", "git", "build", "sqlite", "python", "log-analysis", "tui"} <= {
        t["category"] for t in tasks
    }
    for t in tasks:
        assert "test.sh" in t["tests"]
        assert t["solution"]
        assert "solve.sh" in t["solution"]
        assert t["instruction"].strip()
        assert t["environment"]["steps"]
    assert load_tasks(SHIPPED / "git-recover")[0]["id"] == "dockyard/git-recover"


def test_loader_errors_name_the_file(tmp_path):
    task = tmp_path / "t"
    shutil.copytree(SHIPPED / "word-frequency", task)
    (task / "task.toml").write_text("[agent]\ntimeout_sec = = 3\n")
    with pytest.raises(HarborFormatError, match=r"task\.toml.*line 2"):
        load_tasks(task)
    shutil.copy(SHIPPED / "word-frequency" / "task.toml", task / "task.toml")
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(HarborFormatError, match=r"tests/test\.sh: missing"):
        load_tasks(tmp_path)
    with pytest.raises(HarborFormatError, match="no task directory"):
        load_tasks(tmp_path / "t" / "environment")


# -- against the real sandbox ---------------------------------------------------------------------
def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_validate_shipped_tasks(sandbox_url, arun, capsys):
    """Every shipped task: oracle reaches reward 1, the empty agent does not (in parallel)."""
    env = HarborEnvironment(sandbox_url)
    report = arun(env, validate_async(load_tasks(SHIPPED), env, concurrency=4))
    print(report_table(report))
    bad = [r for r in report["tasks"] if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[:3000]


def _tui_task():
    return next(t for t in load_tasks(SHIPPED) if t["id"] == "dockyard/tui-vault")


def test_keystroke_episode_and_held_out_tests(sandbox_url, arun):
    """A scripted agent drives the TTY program through the `terminal` tool and scores 1; the
    held-out tests and the solution are nowhere in its jails."""
    env = HarborEnvironment(sandbox_url)
    task = _tui_task()

    async def episode():
        state = await env.reset(task)
        try:
            r1 = await env.step(
                state, _call("run", command="ls -a /tests /solution .oracle; cat pin.txt")
            )
            pin = re.findall(r"\b\d{6}\b", r1.observation)[-1]
            r2 = await env.step(
                state, _call("terminal", keys=["python3 vault.py", "<Enter>"], wait_s=1.0)
            )
            await env.step(
                state, _call("terminal", keys=["<Down>", "<Down>", "<Enter>"], wait_s=0.5)
            )
            r3 = await env.step(state, _call("terminal", keys=[pin, "<Enter>"], wait_s=1.0))
            assert "unlocked" in r3.observation, r3.observation
            done = await env.step(state, _call("submit"))
            return r1, r2, done
        finally:
            await env.close(state)

    r1, r2, done = arun(env, episode())
    assert r1.observation.count("No such file or directory") == 3, r1.observation
    assert "VAULT" in r2.observation
    assert "Unlock" in r2.observation
    assert done.done, done.metadata
    assert not done.infra_error, done.metadata
    assert done.rewards["reward/tests"] == 1.0, done.metadata


def test_missing_reward_file_is_zero_not_infra(sandbox_url, arun):
    env = HarborEnvironment(sandbox_url)
    task = dict(_tui_task(), tests={"test.sh": "#!/bin/bash\necho 'PASSED'\nexit 0\n"})

    async def episode():
        state = await env.reset(task)
        try:
            return await env.step(state, _call("submit"))
        finally:
            await env.close(state)

    done = arun(env, episode())
    assert not done.infra_error
    assert done.rewards["reward/tests"] == 0.0
    assert done.metadata["reward_file_missing"]
    assert "no reward file" in done.metadata["reward_file_error"]


def test_provision_failure_is_masked_with_log(sandbox_url, arun):
    env = HarborEnvironment(sandbox_url)
    task = dict(_tui_task(), environment={"steps": [{"run": "echo broken-step >&2; exit 7"}]})

    async def episode():
        state = await env.reset(task)
        try:
            return await env.step(state, _call("submit"))
        finally:
            await env.close(state)

    done = arun(env, episode())
    assert done.infra_error
    assert "exited 7" in done.metadata["provision_failed"]
    assert "broken-step" in done.metadata["provision_log"]
