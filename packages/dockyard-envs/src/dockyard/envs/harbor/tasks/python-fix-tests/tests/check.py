"""Reward: 0 unless the project's own (pristine) test suite passes; then the held-out pass rate."""

import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
os.chdir("/app")
sys.path.insert(0, "/app")


def run(path):
    d = tempfile.mkdtemp()
    shutil.copy(path, d)
    suite = unittest.defaultTestLoader.discover(d, pattern=os.path.basename(path), top_level_dir=d)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(suite)
    n = result.testsRun
    return n, n - len(result.failures) - len(result.errors) - len(result.unexpectedSuccesses)


here = os.path.dirname(os.path.abspath(__file__))
n, ok = run(os.path.join(here, "test_semver_orig.py"))
if n == 0 or ok < n:
    print(0)
else:
    n, ok = run(os.path.join(here, "hidden_test.py"))
    print(round(ok / n, 4) if n else 0)
