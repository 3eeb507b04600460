"""Run /app/ticket.sh with every held-out case; reward = fraction matching the reference exactly
(stdout, stderr and exit status)."""

import os
import subprocess
import sys

sys.path.insert(0, "/tests")
from cases import CASES  # pyright: ignore[reportMissingImports]  (in /tests at run time)
from reference import ticket  # pyright: ignore[reportMissingImports]  (in /tests at run time)

SCRIPT = "/app/ticket.sh"


def main() -> float:
    if not (os.path.isfile(SCRIPT) and os.access(SCRIPT, os.X_OK)):
        print("no executable /app/ticket.sh", file=sys.stderr)
        return 0.0
    ok = 0
    for args in CASES:
        want = ticket(args)
        try:
            p = subprocess.run(
                [SCRIPT, *args],
                capture_output=True,
                text=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
                cwd="/tmp",
            )
            got = (p.stdout, p.stderr, p.returncode)
        except (subprocess.TimeoutExpired, OSError, UnicodeDecodeError) as e:
            got = ("", repr(e), -1)
        if got == want:
            ok += 1
        else:
            print(f"FAIL {args!r}: want {want!r} got {got!r}", file=sys.stderr)
    print(f"{ok}/{len(CASES)} cases pass", file=sys.stderr)
    return ok / len(CASES)


print(main())
