# ruff: noqa: PT009, PT027  (unittest: the task's sandbox has no pytest)
"""Held-out tests of semverlite: SemVer 2.0.0 precedence, equality, bumping."""

import itertools
import unittest

from semverlite import Version, bump, sort_versions

V = Version


class Precedence(unittest.TestCase):
    def test_spec_example_chain(self):
        chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
        ]
        for lo, hi in itertools.pairwise(chain):
            self.assertLess(V(lo), V(hi), f"{lo} < {hi}")
            self.assertGreater(V(hi), V(lo), f"{hi} > {lo}")

    def test_core_numeric(self):
        self.assertLess(V("0.9.99"), V("0.10.0"))
        self.assertLess(V("0.999.999"), V("1.0.0"))
        self.assertLess(V("1.2.9"), V("1.2.10"))
        self.assertGreater(V("10.0.0"), V("9.99.99"))

    def test_prerelease_lower(self):
        self.assertLess(V("1.0.0-0"), V("1.0.0"))
        self.assertLess(V("2.0.0-rc.1"), V("2.0.0"))
        self.assertGreater(V("2.0.0-rc.1"), V("1.99.99"))

    def test_identifiers(self):
        self.assertLess(V("1.0.0-1"), V("1.0.0-a"))  # numeric below alphanumeric
        self.assertLess(V("1.0.0-rc.9"), V("1.0.0-rc.10"))
        self.assertLess(V("1.0.0-alpha-10"), V("1.0.0-alpha-2"))  # alphanumeric: ASCII
        self.assertLess(V("1.0.0-A"), V("1.0.0-a"))
        self.assertLess(V("1.0.0-rc"), V("1.0.0-rc.0"))  # shorter first
        self.assertLess(V("1.0.0-2.x"), V("1.0.0-10.a"))
        self.assertLess(V("1.0.0-x.7.z.92"), V("1.0.0-x.7.z.100"))
        self.assertLess(V("1.0.0-rc.99999999999999999998"), V("1.0.0-rc.99999999999999999999"))

    def test_sort(self):
        got = sort_versions(
            [
                "1.0.0",
                "1.0.0-rc.10",
                "0.10.0",
                "1.0.0-rc.2",
                "0.9.0",
                "1.0.0-beta",
                "10.0.0",
                "2.0.0",
            ]
        )
        self.assertEqual(
            got,
            [
                "0.9.0",
                "0.10.0",
                "1.0.0-beta",
                "1.0.0-rc.2",
                "1.0.0-rc.10",
                "1.0.0",
                "2.0.0",
                "10.0.0",
            ],
        )

    def test_max(self):
        self.assertEqual(str(max(map(V, ["1.2.0", "1.10.0-rc.1", "1.9.0"]))), "1.10.0-rc.1")


class Equality(unittest.TestCase):
    def test_build_ignored(self):
        self.assertEqual(V("1.0.0+a"), V("1.0.0+b"))
        self.assertEqual(V("1.0.0-rc.1+x"), V("1.0.0-rc.1"))
        self.assertEqual(len({V("1.0.0+a"), V("1.0.0+b"), V("1.0.0")}), 1)

    def test_not_equal(self):
        self.assertNotEqual(V("1.0.0"), V("1.0.0-0"))
        self.assertNotEqual(V("1.0.0-rc.1"), V("1.0.0-rc.1.0"))
        self.assertFalse(V("1.0.0") == "1.0.0")

    def test_str_kept(self):
        for s in ["1.10.0", "1.0.0-rc.10+build.2", "0.0.1-x-y.7"]:
            self.assertEqual(str(V(s)), s)

    def test_still_rejects(self):
        for s in ["1.2", "1.02.3", "1.2.3-rc.01", "1.2.3+", "1.2.3-a..b"]:
            with self.assertRaises(ValueError, msg=s):
                V(s)


class Bump(unittest.TestCase):
    def test_bump(self):
        cases = [
            ("1.9.9", "minor", "1.10.0"),
            ("1.2.3+b.1", "patch", "1.2.4"),
            ("2.0.0-beta", "major", "2.0.0"),
            ("1.2.3-rc.1", "patch", "1.2.3"),
            ("1.2.3-rc.1", "minor", "1.3.0"),
            ("1.2.0-rc.1", "major", "2.0.0"),
            ("0.9.9", "major", "1.0.0"),
        ]
        for v, part, want in cases:
            self.assertEqual(bump(v, part), want, f"bump({v!r}, {part!r})")

    def test_bad_part(self):
        with self.assertRaises(ValueError):
            bump("1.0.0", "build")


if __name__ == "__main__":
    unittest.main()
