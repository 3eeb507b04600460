# ruff: noqa: PT009, PT027  (unittest: the task's sandbox has no pytest)
import unittest

from semverlite import Version, bump, sort_versions


class ParseTest(unittest.TestCase):
    def test_round_trip(self):
        for s in ["1.2.3", "0.0.0", "1.0.0-alpha.1", "2.1.0+build.7", "1.0.0-rc.1+exp.sha.5114f85"]:
            self.assertEqual(str(Version(s)), s)

    def test_invalid(self):
        for s in ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3-01", "v1.2.3", ""]:
            with self.assertRaises(ValueError, msg=s):
                Version(s)


class PrecedenceTest(unittest.TestCase):
    def test_numeric_parts(self):
        self.assertLess(Version("1.9.0"), Version("1.10.0"))
        self.assertLess(Version("2.0.0"), Version("10.0.0"))

    def test_prerelease_below_release(self):
        self.assertLess(Version("1.0.0-rc.1"), Version("1.0.0"))

    def test_numeric_identifiers(self):
        self.assertLess(Version("1.0.0-rc.2"), Version("1.0.0-rc.10"))

    def test_build_ignored(self):
        self.assertEqual(Version("1.0.0+a"), Version("1.0.0+b"))

    def test_sort(self):
        self.assertEqual(sort_versions(["1.10.0", "1.2.0", "1.9.1"]), ["1.2.0", "1.9.1", "1.10.0"])


class BumpTest(unittest.TestCase):
    def test_bump(self):
        self.assertEqual(bump("1.2.3", "patch"), "1.2.4")
        self.assertEqual(bump("1.2.3", "minor"), "1.3.0")
        self.assertEqual(bump("1.2.3", "major"), "2.0.0")
        self.assertEqual(bump("1.3.0-rc.1", "minor"), "1.3.0")


if __name__ == "__main__":
    unittest.main()
