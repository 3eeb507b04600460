"""Build the task's repository: main and feature/imperial diverge and conflict.

Deterministic (fixed identities and dates), so every commit hash is the same on every build.
"""

import os
import subprocess

os.remove(__file__)

T0 = 1710000000
ENV = dict(
    os.environ,
    GIT_AUTHOR_NAME="Sam Okafor",
    GIT_AUTHOR_EMAIL="sam@example.com",
    GIT_COMMITTER_NAME="Sam Okafor",
    GIT_COMMITTER_EMAIL="sam@example.com",
)
count = 0


def git(*args):
    subprocess.run(["git", *args], check=True, env=ENV, stdout=subprocess.DEVNULL)


def commit(msg, **files):
    global count
    for name, text in files.items():
        with open(name.replace("__", "."), "w") as f:
            f.write(text)
    count += 1
    date = f"{T0 + count * 7200} +0000"
    git("add", "-A")
    subprocess.run(
        ["git", "commit", "-qm", msg],
        check=True,
        env=dict(ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date),
    )


UNITS = '''"""Length conversion between units."""

FACTORS = {
    "m": 1.0,
    "cm": 0.01,
    "km": 1000.0,
}


def convert(value, src, dst):
    """``value`` in unit ``src``, expressed in unit ``dst``."""
    return value * FACTORS[src] / FACTORS[dst]
'''
CLI = '''"""Command line: python3 cli.py VALUE FROM TO"""
import argparse

from units import convert


def main(argv=None):
    p = argparse.ArgumentParser(prog="units")
    p.add_argument("value", type=float)
    p.add_argument("src")
    p.add_argument("dst")
    a = p.parse_args(argv)
    print(convert(a.value, a.src, a.dst))


if __name__ == "__main__":
    main()
'''
TESTS = """import unittest

from units import convert


class ConvertTest(unittest.TestCase):
    def test_metric(self):
        self.assertAlmostEqual(convert(2.5, "km", "m"), 2500.0)
        self.assertAlmostEqual(convert(30, "cm", "m"), 0.3)
"""
README = "# units\n\nConvert lengths: `python3 cli.py 3 km m`.\n"

git("init", "-q", "-b", "main")
commit(
    "units: metric conversions",
    units__py=UNITS,
    cli__py=CLI,
    README__md=README,
    __gitignore="__pycache__/\n",
)
commit(
    "tests: metric conversions",
    test_units__py=TESTS
    + """

if __name__ == "__main__":
    unittest.main()
""",
)

git("checkout", "-q", "-b", "feature/imperial")
UNITS_F = UNITS.replace(
    """    "km": 1000.0,
}
""",
    """    "km": 1000.0,
    "in": 0.0254,
    "ft": 0.3048,
    "mi": 1609.344,
}

# Spelled-out names accepted for the short ones.
ALIASES = {"inch": "in", "inches": "in", "foot": "ft", "feet": "ft", "mile": "mi", "miles": "mi"}
""",
).replace(
    """    return value * FACTORS[src] / FACTORS[dst]
""",
    '''    src = ALIASES.get(src, src)
    dst = ALIASES.get(dst, dst)
    return value * FACTORS[src] / FACTORS[dst]


def units():
    """Every unit name ``convert`` accepts (aliases excluded), sorted."""
    return sorted(FACTORS)
''',
)
commit("units: imperial units and aliases", units__py=UNITS_F)
CLI_F = CLI.replace(
    """    p.add_argument("value", type=float)
    p.add_argument("src")
    p.add_argument("dst")
    a = p.parse_args(argv)
    print(convert(a.value, a.src, a.dst))
""",
    """    p.add_argument("--list", action="store_true", help="print the known units and exit")
    p.add_argument("value", type=float, nargs="?")
    p.add_argument("src", nargs="?")
    p.add_argument("dst", nargs="?")
    a = p.parse_args(argv)
    if a.list:
        print("\\n".join(units()))
        return
    if a.dst is None:
        p.error("VALUE FROM TO are required")
    print(convert(a.value, a.src, a.dst))
""",
).replace("from units import convert", "from units import convert, units")
commit(
    "cli: --list",
    cli__py=CLI_F,
    README__md=README + "List the units with `python3 cli.py --list`.\n",
)
TESTS_F = (
    TESTS
    + """
    def test_imperial(self):
        self.assertAlmostEqual(convert(1, "mi", "km"), 1.609344)
        self.assertAlmostEqual(convert(12, "in", "ft"), 1.0)

    def test_aliases(self):
        self.assertAlmostEqual(convert(3, "feet", "inches"), 36.0)
"""
)
commit(
    "tests: imperial",
    test_units__py=TESTS_F
    + """

if __name__ == "__main__":
    unittest.main()
""",
)

git("checkout", "-q", "main")
UNITS_M = UNITS.replace(
    """    "km": 1000.0,
}
""",
    """    "km": 1000.0,
    "mm": 0.001,
}
""",
).replace(
    """    return value * FACTORS[src] / FACTORS[dst]
""",
    """    for unit in (src, dst):
        if unit not in FACTORS:
            raise ValueError(f"unknown unit: {unit}")
    return value * FACTORS[src] / FACTORS[dst]
""",
)
commit("units: millimetres; reject unknown units", units__py=UNITS_M)
CLI_M = CLI.replace(
    """    p.add_argument("value", type=float)
    p.add_argument("src")
    p.add_argument("dst")
    a = p.parse_args(argv)
    print(convert(a.value, a.src, a.dst))
""",
    """    p.add_argument("--precision", type=int, default=3, help="decimals to print (default 3)")
    p.add_argument("value", type=float)
    p.add_argument("src")
    p.add_argument("dst")
    a = p.parse_args(argv)
    try:
        result = convert(a.value, a.src, a.dst)
    except ValueError as e:
        p.error(str(e))
    print(f"{result:.{a.precision}f} {a.dst}")
""",
)
commit(
    "cli: --precision, print the unit, errors exit 2",
    cli__py=CLI_M,
    README__md=README + "Unknown units are an error (exit status 2).\n",
)
TESTS_M = (
    TESTS
    + """
    def test_mm(self):
        self.assertAlmostEqual(convert(1500, "mm", "m"), 1.5)

    def test_unknown(self):
        with self.assertRaisesRegex(ValueError, "unknown unit: yard"):
            convert(1, "yard", "m")
"""
)
commit(
    "tests: mm and unknown units",
    test_units__py=TESTS_M
    + """

if __name__ == "__main__":
    unittest.main()
""",
)
assert count == 8, count
