"""Helpers for tests and examples: build repositories as tarballs, find leftover sandbox processes.

``CALC_REPO`` is a tiny SWE-style repository: ``calc.add`` has a bug (it subtracts), the
held-out test ``tests/test_calc.py::test_add`` fails on it (FAIL_TO_PASS) and
``tests/test_calc.py::test_mul`` passes (PASS_TO_PASS); ``CALC_FIX`` is the correct patch.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
import tempfile
from collections.abc import Mapping

from dockyard.sandbox.models import RepoSpec, Task, TestsSpec

CALC_REPO = {
    "calc/__init__.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "README.md": "calc\n",
}
CALC_TESTS = {
    "tests/test_calc.py": (
        "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_mul():\n    assert mul(2, 3) == 6\n"
    )
}
CALC_FIX = """diff --git a/calc/__init__.py b/calc/__init__.py
--- a/calc/__init__.py
+++ b/calc/__init__.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b


 def mul(a, b):
"""
CALC_TEST_IDS = TestsSpec(
    fail_to_pass=["tests/test_calc.py::test_add"], pass_to_pass=["tests/test_calc.py::test_mul"]
)


def make_tarball(
    files: Mapping[str, str | bytes], *, raw_members: list[tarfile.TarInfo] | None = None
) -> str:
    """A base64 ``.tar.gz`` holding ``files`` (path -> content), plus any ``raw_members``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tf.addfile(info, io.BytesIO(data))
        for m in raw_members or []:
            tf.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return base64.b64encode(buf.getvalue()).decode()


def calc_task(patch: str = CALC_FIX, **kw: object) -> Task:
    """A task over ``CALC_REPO`` with the held-out calc tests."""
    fields: dict[str, object] = {
        "repo": RepoSpec(tarball=make_tarball(CALC_REPO)),
        "patch": patch,
        "test_files": dict(CALC_TESTS),
        "tests": CALC_TEST_IDS,
        "timeout_s": 60,
    }
    fields.update(kw)
    return Task.model_validate(fields)


def sandbox_processes(uid_base: int = 200_000, size: int = 4096) -> list[tuple[int, int, str]]:
    """(pid, uid, cmdline) of every process whose real uid is in the task uid pool."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, StopIteration):
            continue
        if uid_base <= uid < uid_base + size:
            out.append((int(pid), uid, cmd))
    return out


def layer_cache_dir() -> str:
    """The ``--env-cache-dir`` that test services building layered images share: base roots
    and layers are keyed by content, so one CI run builds each base once for every suite
    (``DOCKYARD_TEST_LAYER_CACHE`` overrides it)."""
    return os.environ.get("DOCKYARD_TEST_LAYER_CACHE") or os.path.join(
        tempfile.gettempdir(), "dockyard-test-layer-cache"
    )
