"""Re-render the table from the pristine CSV (tests/gen.py); compare /app/table.md exactly
(only a missing final newline is tolerated)."""

import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

want = gen.render(gen.build()["data/inventory.csv"]).removesuffix("\n").split("\n")
try:
    with open("/app/table.md", "rb") as f:
        got = f.read().decode("utf-8").removesuffix("\n").split("\n")
except (OSError, UnicodeDecodeError):
    got = []
diff = [i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w]
print("lines", len(got), "of", len(want), "first differences at", diff[:5], file=sys.stderr)
print(1 if got == want else 0)
