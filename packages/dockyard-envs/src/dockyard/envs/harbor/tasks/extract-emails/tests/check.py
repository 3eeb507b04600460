"""Recompute the normalised, deduplicated, sorted address list from the pristine inbox
(tests/gen.py); compare /app/emails.txt exactly (line by line)."""

import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

want = gen.expected(gen.build())
print(len(want), "addresses expected", file=sys.stderr)
try:
    with open("/app/emails.txt", encoding="utf-8") as f:
        got = [ln.strip() for ln in f.read().strip().splitlines()]
except (OSError, UnicodeDecodeError):
    got = []
print(
    "missing:",
    sorted(set(want) - set(got))[:5],
    "extra:",
    sorted(set(got) - set(want))[:5],
    file=sys.stderr,
)
print(1 if got == want else 0)
