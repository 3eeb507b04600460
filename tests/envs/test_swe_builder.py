"""The mutation engine, diff extraction and manifests (no sandbox needed)."""

from __future__ import annotations

import ast
import difflib
import json

import pytest

from dockyard.envs.swe import extract_patch, load_shipped_tasks
from dockyard.envs.swe.builder.build import source_files
from dockyard.envs.swe.builder.issue import problem_statement
from dockyard.envs.swe.builder.mutate import KINDS, apply_mutation, enumerate_mutations
from dockyard.envs.swe.builder.report import drop_invalid, markdown
from dockyard.envs.swe.builder.runner import Outcome, run_pytest
from dockyard.envs.swe.builder.versions import changelog_entry, is_test_file
from dockyard.envs.swe.instance import materialize, unified_diff
from dockyard.envs.swe.validate import report as validation_report

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


LIB = "def double(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x * 3\n"
LIB_TEST = """import unittest

from lib import double


def test_double():
    assert double(2) == 4


def test_negative_is_fine():
    assert double(
        -1
    ) == -2


def test_zero():
    assert double(0) == 0


class TestSub(unittest.TestCase):
    def test_each(self):
        for x in (1, 2):
            with self.subTest(x=x):
                self.assertEqual(double(x), 3 * x)
"""


def test_runner_records_the_evidence_and_the_issue_is_written_from_it(tmp_path):
    """A real pytest run of a tiny buggy library: each failure's message, the test's own line
    (a multi-line statement whole) and the library file that raised; the issue quotes them."""
    (tmp_path / "lib.py").write_text(LIB)
    (tmp_path / "test_lib.py").write_text(LIB_TEST)
    res = run_pytest(tmp_path)
    assert res["test_lib.py::test_zero"] == Outcome("passed", "", "", "")
    # subTest reports each sub-case: never a task's test (the sandbox's runner refuses those)
    assert res["test_lib.py::TestSub::test_each"].outcome == "subtests"
    dbl, neg = res["test_lib.py::test_double"], res["test_lib.py::test_negative_is_fine"]
    assert dbl.outcome == neg.outcome == "failed"
    assert dbl.statement == "assert double(2) == 4"
    assert dbl.message.startswith("assert 6 == 4")
    assert dbl.crash_path.endswith("test_lib.py")  # an assertion: raised in the test itself
    assert neg.statement == "assert double(\n    -1\n) == -2"
    assert neg.message == "ValueError: negative"
    assert neg.crash_path == str(tmp_path / "lib.py")

    rel = {
        k: v._replace(crash_path=v.crash_path.removeprefix(f"{tmp_path}/")) for k, v in res.items()
    }
    text = problem_statement(
        "lib",
        {k: rel[k] for k in ("test_lib.py::test_double", "test_lib.py::test_negative_is_fine")},
        2,
    )
    assert text.startswith("After a recent change, `lib` misbehaves: 2 test(s)")
    assert (
        "`pytest test_lib.py::test_double`\n\nfails at\n\n```python\nassert double(2) == 4\n```"
        in text
    )
    assert "```\nValueError: negative\n```\n\n(the exception is raised in `lib.py`)" in text
    assert text.count("the exception is raised in") == 1  # not for the test's own assertion
    assert "x * 3" not in text  # never the library's source

    more = problem_statement(
        "lib", {"t.py::test_a": "boom\n" * 40}, 12, [f"t.py::test_{i}" for i in range(11)]
    )
    assert "boom\n" * 12 + "..." in more
    assert "`t.py::test_7` and 3 more." in more


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


def test_publishing_drops_invalid_instances_and_refuses_a_stale_report():
    def task(i, pkg):
        return {"instance_id": f"{pkg}__1.0__m{i:03d}", "repo": f"pypi/{pkg}", "FAIL_TO_PASS": ["t.py::a"],
                "source": {"package": pkg, "version": "1.0"}, "mutation": {"kind": "compare"}}  # fmt: skip

    tasks = [task(1, "a"), task(2, "a"), task(1, "b")]
    rows = [
        {"instance_id": t["instance_id"], "repo": t["repo"], "valid": i != 1, "reason": "" if i != 1 else "gold: failed"}
        for i, t in enumerate(tasks)
    ]  # fmt: skip
    kept, rep = drop_invalid(tasks, validation_report(rows))
    assert [t["instance_id"] for t in kept] == ["a__1.0__m001", "b__1.0__m001"]
    assert (rep["instances"], rep["valid"], rep["invalid"]) == (2, 2, [])
    assert rep["dropped"] == [{"instance_id": "a__1.0__m002", "reason": "gold: failed"}]
    md = markdown(kept, rep, "scripts/build_swe_tasks.sh")
    assert "| a==1.0 | 1 | 1 | 1.0 | compare 1 |" in md
    assert "| **total (2 libraries)** | 2 | 2 | | |" in md
    assert "* `a__1.0__m002`: gold: failed" in md
    with pytest.raises(ValueError, match="validate the tasks file again"):
        drop_invalid([*tasks, task(3, "b")], validation_report(rows))


def test_release_pairs_split_tests_from_source_and_quote_the_changelog():
    assert is_test_file("tests/test_core.py")
    assert is_test_file("tests/data/case.sql")  # fixtures travel with the test patch
    assert is_test_file("pkg/test/helpers.py")
    assert is_test_file("test_pkg.py")
    assert not is_test_file("pkg/core.py")
    assert not is_test_file("pkg/contest.py")
    old = {"CHANGES.rst": b"1.0\n---\n* first\n", "docs/changelog.md": b"x\n"}
    new = {
        "CHANGES.rst": b"1.1\n---\n* Fix split() on empty input (#12).\n\n1.0\n---\n* first\n",
        "docs/changelog.md": b"x\n* Faster join().\n",
        "pkg/news.py": b"y = 1\n",  # source, not a changelog
        "pkg/docs/history.txt": b"z\n",  # not at the top or in docs/
    }
    entry = "1.1\n---\n* Fix split() on empty input (#12).\n\n* Faster join()."
    assert changelog_entry(old, new) == entry
    assert changelog_entry(old, old) == ""
