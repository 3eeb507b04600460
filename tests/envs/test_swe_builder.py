"""The mutation engine, diff extraction and manifests (no sandbox needed)."""

from __future__ import annotations

import ast
import difflib
import json

import pytest

from dockyard.envs.swe import extract_patch, load_shipped_tasks
from dockyard.envs.swe.builder.build import problem_statement, source_files
from dockyard.envs.swe.builder.mutate import KINDS, apply_mutation, enumerate_mutations
from dockyard.envs.swe.instance import materialize, unified_diff

SRC = '''"""doc"""


def clamp(x, lo, hi):
    """Clamp x."""
    if x < lo:
        return lo
    if x > hi and not False:
        return hi
    return x


def window(xs, n=2):
    total = 0
    for i in range(len(xs) - n + 1):
        total = total + xs[i] * 3
    return max(total, 0) | 1
'''


def _changed_lines(a: str, b: str) -> list[str]:
    return [
        ln
        for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]


def test_every_kind_is_found_and_each_mutation_is_minimal_valid_python():
    muts = enumerate_mutations(SRC)
    assert {m.kind for m in muts} == set(KINDS)
    for m in muts:
        out = apply_mutation(SRC, m)
        ast.parse(out)
        assert out != SRC
        changed = _changed_lines(SRC, out)
        if m.kind == "remove_branch":
            assert all(ln.startswith("-") for ln in changed)
        else:  # a one-line token edit
            assert len(changed) == 2, (m, changed)
    assert enumerate_mutations(SRC) == muts  # deterministic


@pytest.mark.parametrize(
    ("kind", "variant", "before", "after"),
    [
        ("compare", "<=", "if x < lo:", "if x <= lo:"),
        ("binop", "//", "xs[i] * 3", "xs[i] // 3"),
        ("boolop", "or", "x > hi and not False", "x > hi or not False"),
        ("not", "drop", "and not False", "and False"),
        ("off_by_one", "-1", "- n + 1", "- n + 0"),
        ("swap_args", "0<->1", "max(total, 0)", "max(0, total)"),
    ],
)
def test_specific_mutations(kind, variant, before, after):
    m = next(
        m
        for m in enumerate_mutations(SRC)
        if m.kind == kind and m.variant == variant and before in SRC.splitlines()[m.line - 1]
    )
    out = apply_mutation(SRC, m)
    assert after in out.splitlines()[m.line - 1]


def test_strings_docstrings_and_string_concat_are_not_mutated():
    src = 's = "a" + "b"\nt = "%s" % 3\n\ndef f():\n    """7"""\n    return 1\n'
    assert {m.kind for m in enumerate_mutations(src)} == {"off_by_one"}


def test_mutation_spec_is_checked_against_the_source():
    m = enumerate_mutations(SRC)[0]
    with pytest.raises(KeyError, match="does not apply"):
        apply_mutation(
            SRC.replace("clamp", "clip").replace("    if x < lo", "\n    if x < lo"), m.spec()
        )


def test_reverse_diff_round_trips():
    m = next(m for m in enumerate_mutations(SRC) if m.kind == "compare")
    buggy = apply_mutation(SRC, m)
    gold = unified_diff("pkg/mod.py", buggy, SRC)
    assert gold.startswith(
        "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@"
    )
    assert extract_patch(f"Here you go:\n```diff\n{gold}```\nThis flips it back.") == gold


def test_extract_patch_tolerates_prose_fences_blank_lines_and_bad_counts():
    resp = "I think the fix is:\n\n--- a/x.py\n+++ b/x.py\n@@ -1,9 +1,9 @@\n def f(a):\n\n-    return a < 1\n+    return a <= 1\nHope that helps!\n"
    assert (
        extract_patch(resp)
        == "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n def f(a):\n \n-    return a < 1\n+    return a <= 1\n"
    )
    two = "```diff\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n```\nand\n```diff\n--- a/b.py\n+++ b/b.py\n@@ -2 +2 @@\n-p\n+q\n```"
    assert extract_patch(two).count("@@ -") == 2
    assert extract_patch("no diff, sorry") == ""
    assert extract_patch("--- a/x\n+++ b/x\n") == ""  # headers without hunks


def test_source_file_selection_skips_tests_and_packaging():
    files = dict.fromkeys(
        [
            "pkg/__init__.py",
            "pkg/core.py",
            "tests/test_core.py",
            "pkg/tests/util.py",
            "setup.py",
            "docs/conf.py",
            "test_pkg.py",
            "conftest.py",
        ],
        b"",
    )
    assert source_files(files) == ["pkg/__init__.py", "pkg/core.py"]
    text = problem_statement("pkg", {"t.py::test_a": "AssertionError: assert 1 == 2\nmore"}, 4)
    assert "4 test(s)" in text
    assert "`t.py::test_a`: AssertionError: assert 1 == 2 more" in text


def test_shipped_manifests_hold_no_source_and_regenerate():
    tasks = load_shipped_tasks()
    assert len(tasks) >= 30
    assert len({t["source"]["package"] for t in tasks}) >= 2
    assert len({t["instance_id"] for t in tasks}) == len(tasks)
    allowed = {"instance_id", "repo", "base_commit", "version", "created_at", "problem_statement", "hints_text",
               "FAIL_TO_PASS", "PASS_TO_PASS", "source", "file", "file_sha256", "mutation", "mutation_description",
               "num_failing"}  # fmt: skip
    for t in tasks:
        assert set(t) <= allowed, set(t) - allowed
        assert "patch" not in t
        assert "def " not in json.dumps(t["mutation"])
        assert 1 <= len(t["FAIL_TO_PASS"]) <= 3
        assert not set(t["FAIL_TO_PASS"]) & set(t["PASS_TO_PASS"])
    inst = materialize(tasks[0])  # downloads the sdist into the cache on first use
    assert inst.patch.startswith(f"diff --git a/{tasks[0]['file']}")
    assert inst.test_files
    assert materialize(tasks[0]).patch == inst.patch  # deterministic regeneration
