"""The repository agent's editor: SWE-agent's ``str_replace_editor`` semantics on plain text."""

from __future__ import annotations

import pytest

from dockyard.envs.swe import editor
from dockyard.envs.swe.editor import EditorError

TEXT = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n"


def test_view_numbers_lines_and_cuts_ranges():
    full = editor.view("m.py", TEXT)
    assert "     1\tdef f(x):\n     2\t    return x + 1\n" in full
    part = editor.view("m.py", TEXT, [5, 6])
    assert "     5\tdef g(x):\n     6\t    return x + 1" in part
    assert "     4\t" not in part
    assert "     7\t" in editor.view("m.py", TEXT, [6, -1])  # -1: to the end
    for bad in ([0, 2], [3, 2], [1, 99]):
        with pytest.raises(EditorError, match="Invalid `view_range`"):
            editor.view("m.py", TEXT, bad)


def test_str_replace_needs_exactly_one_match():
    new, msg = editor.str_replace(
        "m.py", TEXT, "def g(x):\n    return x + 1", "def g(x):\n    return x - 1"
    )
    assert new == TEXT.replace("return x + 1\n", "return x - 1\n").replace(
        "x - 1\n\n\ndef g", "x + 1\n\n\ndef g"
    )
    assert new.count("x - 1") == 1
    assert "has been edited" in msg
    assert "     6\t    return x - 1" in msg  # the snippet shows the edit with its line number
    with pytest.raises(
        EditorError, match=r"Multiple occurrences of old_str `return x \+ 1` in lines \[2, 6\]"
    ):
        editor.str_replace("m.py", TEXT, "return x + 1", "return x")
    with pytest.raises(EditorError, match=r"did not appear verbatim in m\.py"):
        editor.str_replace("m.py", TEXT, "return y", "return x")
    with pytest.raises(EditorError, match="`old_str` is empty"):
        editor.str_replace("m.py", TEXT, "", "x")


def test_insert_after_a_line_within_range():
    new, msg = editor.insert("m.py", TEXT, 0, "import os\n")
    assert "     1\timport os" in msg
    assert new.startswith("import os\ndef f(x):")
    new, _ = editor.insert("m.py", TEXT, 2, "    # done")
    assert new.split("\n")[2] == "    # done"
    assert new.count("\n") == TEXT.count("\n") + 1
    end, _ = editor.insert("m.py", TEXT, 6, "def h():\n    pass")
    assert end.endswith("    return x + 1\ndef h():\n    pass\n")
    with pytest.raises(EditorError, match=r"Invalid `insert_line` parameter: 7.*\[0, 6\]"):
        editor.insert("m.py", TEXT, 7, "x")
