"""The ``dockyard`` console script's quick exit (``dockyard.train.cli.console_main``): the
command's output, exit code and ``atexit`` handlers are kept; only the interpreter's teardown is
skipped, and not while a non-daemon thread still works."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = """
import atexit, sys, threading, time
sys.argv = ["dockyard", *{argv!r}]
atexit.register(lambda: print("atexit handler ran", flush=True))
if {thread!r}:
    def work():
        time.sleep(1.0)
        print("thread finished its work", flush=True)
    threading.Thread(target=work).start()
from dockyard.train.cli import console_main
console_main()
print("not reached: console_main exits", flush=True)
"""


def _run(argv: list[str], thread: bool = False) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(SCRIPT.format(argv=argv, thread=thread))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_finished_command_exits_with_its_output_code_and_atexit_handlers() -> None:
    r = _run([])  # no command: the help, then main() returns 0
    assert r.returncode == 0, r.stderr
    assert "usage: dockyard" in r.stdout
    assert "atexit handler ran" in r.stdout
    assert "not reached" not in r.stdout


def test_a_failing_command_keeps_its_exit_code() -> None:
    r = _run(["config", "check", "/nonexistent/run.yaml"])
    assert r.returncode != 0
    assert "/nonexistent/run.yaml" in r.stdout + r.stderr
    assert "atexit handler ran" in r.stdout


def test_a_running_non_daemon_thread_finishes_before_the_exit() -> None:
    r = _run([], thread=True)
    assert r.returncode == 0, r.stderr
    assert "thread finished its work" in r.stdout
    assert "atexit handler ran" in r.stdout
