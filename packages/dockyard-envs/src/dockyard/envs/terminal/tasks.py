"""The shipped terminal tasks. Each one: starting files, an instruction, held-out tests run at
``finish`` in a fresh sandbox, and a scripted *oracle* (a list of model turns) that solves it —
the tests in ``tests/envs`` run every oracle through the real environment and sandbox.

A task dict: ``{"id", "instruction", "files": {path: content}, "test_files": {path: content},
"tests": [node ids], "oracle": [turn, ...]}``. Files listed in ``test_files`` are restored
from the trusted copy before the tests run, so an agent cannot pass by editing them.
"""

from __future__ import annotations

import json
from typing import Any


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


_STATS = '''def mean(xs):
    """The arithmetic mean of a non-empty list."""
    return sum(xs) / (len(xs) - 1)


def spread(xs):
    return max(xs) - min(xs)
'''

_APP = """import json

with open("settings.json") as f:
    settings = json.load(f)
port = settings["port"]
assert isinstance(port, int), f"port must be an integer, got {port!r}"
print(f"listening on {port}")
"""

_SALES = "region,amount\nnorth,120\nsouth,75\neast,310\nwest,45\nnorth,50\n"

TASKS: list[dict[str, Any]] = [
    {
        "id": "term/fix-mean",
        "instruction": "The function `mean` in `stats.py` returns wrong results. Find and fix the bug, then submit.",
        "files": {"stats.py": _STATS},
        "test_files": {
            "test_hidden_stats.py": (
                "from stats import mean, spread\n\n"
                "def test_mean():\n    assert mean([1, 2, 3, 4]) == 2.5\n\n"
                "def test_mean_single():\n    assert mean([7]) == 7\n\n"
                "def test_spread_untouched():\n    assert spread([3, 9, 1]) == 8\n"
            )
        },
        "tests": [
            "test_hidden_stats.py::test_mean",
            "test_hidden_stats.py::test_mean_single",
            "test_hidden_stats.py::test_spread_untouched",
        ],
        "oracle": [
            "Let me look at the code first.\n" + _call("read_file", path="stats.py"),
            "The denominator is off by one.\n"
            + _call(
                "write_file", path="stats.py", content=_STATS.replace("(len(xs) - 1)", "len(xs)")
            ),
            _call("run", command="python -c 'from stats import mean; print(mean([1, 2, 3, 4]))'"),
            _call("submit"),
        ],
    },
    {
        "id": "term/word-count",
        "instruction": (
            "Write a script `wc.py` that prints the number of words (whitespace-separated) in "
            "`data.txt` as a single integer, then submit."
        ),
        "files": {"data.txt": "the quick brown fox\njumps over\n\nthe lazy dog  \n"},
        "test_files": {
            "test_hidden_wc.py": (
                "import subprocess, sys\n\n"
                "def test_count():\n"
                "    out = subprocess.run([sys.executable, 'wc.py'], capture_output=True, text=True, timeout=20)\n"
                "    assert out.stdout.strip() == '9'\n\n"
                "def test_other_file():\n"
                "    with open('data.txt', 'w') as f:\n        f.write('a b\\nc\\n')\n"
                "    out = subprocess.run([sys.executable, 'wc.py'], capture_output=True, text=True, timeout=20)\n"
                "    assert out.stdout.strip() == '3'\n"
            )
        },
        "tests": ["test_hidden_wc.py::test_count", "test_hidden_wc.py::test_other_file"],
        "oracle": [
            _call("run", command="ls -la && wc -w data.txt"),
            _call(
                "write_file", path="wc.py", content="print(len(open('data.txt').read().split()))\n"
            ),
            _call("run", command="python wc.py") + "\n" + _call("submit"),
        ],
    },
    {
        "id": "term/fix-config",
        "instruction": (
            "`python app.py` crashes. Make it print `listening on 8080` by fixing the configuration "
            "(do not edit app.py), then submit."
        ),
        "files": {"app.py": _APP, "settings.json": '{"host": "0.0.0.0", "port": "8080"}\n'},
        "test_files": {
            "app.py": _APP,  # held out: restored before the tests, so editing it cannot help
            "test_hidden_app.py": (
                "import subprocess, sys\n\n"
                "def test_runs():\n"
                "    out = subprocess.run([sys.executable, 'app.py'], capture_output=True, text=True, timeout=20)\n"
                "    assert out.returncode == 0, out.stderr\n"
                "    assert out.stdout.strip() == 'listening on 8080'\n"
            ),
        },
        "tests": ["test_hidden_app.py::test_runs"],
        "oracle": [
            _call("run", command="python app.py"),
            _call("read_file", path="settings.json"),
            _call(
                "write_file", path="settings.json", content='{"host": "0.0.0.0", "port": 8080}\n'
            ),
            _call("run", command="python app.py"),
            _call("submit"),
        ],
    },
    {
        "id": "term/csv-total",
        "instruction": (
            "`sales.csv` has an `amount` column. Write the total of that column (an integer) to "
            "`total.txt`, then submit."
        ),
        "files": {"sales.csv": _SALES},
        "test_files": {
            "test_hidden_total.py": (
                "def test_total():\n    assert open('total.txt').read().strip() == '600'\n"
            )
        },
        "tests": ["test_hidden_total.py::test_total"],
        "oracle": [
            _call("run", command="head -3 sales.csv"),
            _call(
                "run",
                command="python -c \"import csv; print(sum(int(r['amount']) for r in csv.DictReader(open('sales.csv'))))\" > total.txt && cat total.txt",
            ),
            _call("submit"),
        ],
    },
]


def load_terminal_tasks() -> list[dict[str, Any]]:
    """The shipped terminal tasks (copies)."""
    return json.loads(json.dumps(TASKS))


def terminal_dataset(split: str) -> list[dict[str, Any]]:
    """The ``terminal`` dataset: the shipped tasks (the same for every split)."""
    return load_terminal_tasks()
