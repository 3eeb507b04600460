"""Reward 0.5 per requested entry whose secret is in /app/unlocked/NAME.txt exactly as vault.py
writes it; 0 if any other file is there. The secrets are held out here: the agent only ever saw
them encrypted (vault.json, fresh salts per build)."""

import os
import sys

WANT = {"db": "V9i1A9JvKcXc1J7_xjibvAeQ", "api": "hzAuOCtcN8pNLGjSLvLQElq-"}


def main() -> float:
    present = set(os.listdir("/app/unlocked")) if os.path.isdir("/app/unlocked") else set()
    extra = present - {f"{n}.txt" for n in WANT}
    if extra:
        print(f"unexpected files in unlocked/: {sorted(extra)}", file=sys.stderr)
        return 0.0
    score = 0.0
    for name, secret in WANT.items():
        try:
            with open(f"/app/unlocked/{name}.txt") as f:
                ok = f.read() == secret + "\n"
        except OSError:
            ok = False
        print(f"{name}: {'ok' if ok else 'missing or wrong'}", file=sys.stderr)
        score += 0.5 * ok
    return score


print(main())
