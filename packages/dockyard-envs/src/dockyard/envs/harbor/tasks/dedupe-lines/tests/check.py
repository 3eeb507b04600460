"""Recompute the first occurrences from the pristine contacts (tests/gen.py); compare
/app/data/unique.txt line by line, exactly (only a missing final newline is tolerated)."""

import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

want = gen.expected(gen.build()["data/contacts.txt"])
print(len(want), "records expected", file=sys.stderr)
try:
    with open("/app/unique.txt", "rb") as f:
        got = f.read().decode("utf-8").removesuffix("\n").split("\n")
except (OSError, UnicodeDecodeError):
    got = []
diff = [i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w]
print("lines", len(got), "first differences at", diff[:5], file=sys.stderr)
print(1 if got == want else 0)
