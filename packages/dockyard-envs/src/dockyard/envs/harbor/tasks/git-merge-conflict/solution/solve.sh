#!/bin/bash
cd /app
git merge feature/imperial >/dev/null 2>&1
cat > units.py <<'EOF'
"""Length conversion between units."""

FACTORS = {
    "m": 1.0,
    "cm": 0.01,
    "km": 1000.0,
    "mm": 0.001,
    "in": 0.0254,
    "ft": 0.3048,
    "mi": 1609.344,
}

# Spelled-out names accepted for the short ones.
ALIASES = {"inch": "in", "inches": "in", "foot": "ft", "feet": "ft", "mile": "mi", "miles": "mi"}


def convert(value, src, dst):
    """``value`` in unit ``src``, expressed in unit ``dst``."""
    src = ALIASES.get(src, src)
    dst = ALIASES.get(dst, dst)
    for unit in (src, dst):
        if unit not in FACTORS:
            raise ValueError(f"unknown unit: {unit}")
    return value * FACTORS[src] / FACTORS[dst]


def units():
    """Every unit name ``convert`` accepts (aliases excluded), sorted."""
    return sorted(FACTORS)
EOF
cat > cli.py <<'EOF'
"""Command line: python3 cli.py VALUE FROM TO"""
import argparse

from units import convert, units


def main(argv=None):
    p = argparse.ArgumentParser(prog="units")
    p.add_argument("--list", action="store_true", help="print the known units and exit")
    p.add_argument("--precision", type=int, default=3, help="decimals to print (default 3)")
    p.add_argument("value", type=float, nargs="?")
    p.add_argument("src", nargs="?")
    p.add_argument("dst", nargs="?")
    a = p.parse_args(argv)
    if a.list:
        print("\n".join(units()))
        return
    if a.dst is None:
        p.error("VALUE FROM TO are required")
    try:
        result = convert(a.value, a.src, a.dst)
    except ValueError as e:
        p.error(str(e))
    print(f"{result:.{a.precision}f} {a.dst}")


if __name__ == "__main__":
    main()
EOF
cat > test_units.py <<'EOF'
import unittest

from units import convert


class ConvertTest(unittest.TestCase):
    def test_metric(self):
        self.assertAlmostEqual(convert(2.5, "km", "m"), 2500.0)
        self.assertAlmostEqual(convert(30, "cm", "m"), 0.3)

    def test_mm(self):
        self.assertAlmostEqual(convert(1500, "mm", "m"), 1.5)

    def test_unknown(self):
        with self.assertRaisesRegex(ValueError, "unknown unit: yard"):
            convert(1, "yard", "m")

    def test_imperial(self):
        self.assertAlmostEqual(convert(1, "mi", "km"), 1.609344)
        self.assertAlmostEqual(convert(12, "in", "ft"), 1.0)

    def test_aliases(self):
        self.assertAlmostEqual(convert(3, "feet", "inches"), 36.0)


if __name__ == "__main__":
    unittest.main()
EOF
printf '# units\n\nConvert lengths: `python3 cli.py 3 km m`.\nUnknown units are an error (exit status 2).\nList the units with `python3 cli.py --list`.\n' > README.md
git add units.py cli.py test_units.py README.md
git commit -q --no-edit
