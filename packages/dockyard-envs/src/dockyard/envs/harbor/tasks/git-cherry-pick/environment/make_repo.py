"""Build the task's repository: a fix on release-1.x, among unrelated release commits.

Deterministic (fixed identities and dates), so every commit hash is the same on every build.
"""

import os
import subprocess

os.remove(__file__)

T0 = 1720000000
ENV = dict(
    os.environ,
    GIT_AUTHOR_NAME="Lee Park",
    GIT_AUTHOR_EMAIL="lee@example.com",
    GIT_COMMITTER_NAME="Lee Park",
    GIT_COMMITTER_EMAIL="lee@example.com",
)
count = 0


def git(*args):
    subprocess.run(["git", *args], check=True, env=ENV, stdout=subprocess.DEVNULL)


def commit(msg, files=(), remove=()):
    global count
    for name in remove:
        git("rm", "-q", name)
    for name, text in dict(files).items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w") as f:
            f.write(text)
    count += 1
    date = f"{T0 + count * 3600} +0000"
    git("add", "-A")
    subprocess.run(
        ["git", "commit", "-qm", msg],
        check=True,
        env=dict(ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date),
    )


PAGER = '''"""Split a list of items into numbered pages (1-based)."""

MAX_PAGE_SIZE = 500


def page_count(total, size):
    return total // size + 1


def page(items, number, size):
    if number < 1 or number > page_count(len(items), size):
        raise IndexError(f"no page {number}")
    start = (number - 1) * size
    return items[start:start + size]
'''
TESTS = """import unittest

from {mod} import page, page_count


class PagerTest(unittest.TestCase):
    def test_count(self):
        self.assertEqual(page_count(11, 5), 3)

    def test_page(self):
        items = list(range(11))
        self.assertEqual(page(items, 3, 5), [10])
{extra}

if __name__ == "__main__":
    unittest.main()
"""
FIX_TEST = """
    def test_exact_multiple(self):
        self.assertEqual(page_count(10, 5), 2)
        self.assertEqual(page_count(0, 5), 0)
        with self.assertRaises(IndexError):
            page(list(range(10)), 3, 5)
"""
git("init", "-q", "-b", "main")
commit(
    "pager: first version",
    {
        "pager.py": PAGER,
        "test_pager.py": TESTS.format(mod="pager", extra=""),
        "VERSION": "1.0.0\n",
        ".gitignore": "__pycache__/\n",
        "README.md": "# pager\n\nRun the tests: `python3 -m unittest`.\n",
    },
)
git("branch", "release-1.x")

# main moves on: a package layout, type hints and argument checks, a new version line
commit(
    "move pager into the shop package",
    {
        "shop/__init__.py": '"""The shop\'s helpers."""\n',
        "shop/pager.py": PAGER,
        "test_pager.py": TESTS.format(mod="shop.pager", extra=""),
    },
    remove=["pager.py"],
)
PAGER_MAIN = PAGER.replace(
    """def page_count(total, size):
    return total // size + 1


def page(items, number, size):
    if number < 1""",
    '''def page_count(total: int, size: int) -> int:
    """How many pages ``total`` items fill at ``size`` per page."""
    return total // size + 1


def page(items: list, number: int, size: int) -> list:
    """Page ``number`` (1-based) of ``items``; IndexError past the last page."""
    if not 0 < size <= MAX_PAGE_SIZE:
        raise ValueError(f"page size must be in 1..{MAX_PAGE_SIZE}")
    if number < 1''',
)
commit("pager: type hints, reject bad page sizes", {"shop/pager.py": PAGER_MAIN})
commit("start 2.0 development", {"VERSION": "2.0.0-dev\n"})

git("checkout", "-q", "release-1.x")
commit("release 1.0.1", {"VERSION": "1.0.1\n"})
PAGER_FIX = PAGER.replace(
    "    return total // size + 1\n",
    "    return -(-total // size)  # ceiling: 10 items at 5 per page are 2 pages\n",
)
commit(
    "pager: fix page count for exact multiples",
    {"pager.py": PAGER_FIX, "test_pager.py": TESTS.format(mod="pager", extra=FIX_TEST)},
)
commit(
    "changelog for 1.0.1", {"CHANGES.md": "## 1.0.1\n\n* page count fixed for exact multiples\n"}
)
commit(
    "hotfix for ACME: cap pages at 50 items",
    {
        "pager.py": PAGER_FIX.replace("MAX_PAGE_SIZE = 500", "MAX_PAGE_SIZE = 50").replace(
            "    start =", "    size = min(size, MAX_PAGE_SIZE)\n    start ="
        )
    },
)
git("checkout", "-q", "main")
assert count == 8, count
