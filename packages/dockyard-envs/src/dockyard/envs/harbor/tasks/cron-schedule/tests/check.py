"""Reward = fraction of the held-out crontab's jobs whose 5 next runs are exactly right (0 if
next_runs.json has jobs that are not in the crontab or is not a JSON object)."""

import datetime as dt
import json
import sys

sys.path.insert(0, "/tests")
from cron_ref import schedule  # pyright: ignore[reportMissingImports]  (in /tests at run time)

with open("/tests/crontab") as f:
    want = schedule(f.read(), dt.datetime(2025, 3, 8, 23, 59, 30))
try:
    with open("/app/next_runs.json") as f:
        got = json.load(f)
    assert isinstance(got, dict)
except (OSError, ValueError, AssertionError) as e:
    print(f"no usable /app/next_runs.json: {e}", file=sys.stderr)
    print(0)
    sys.exit(0)
extra = set(got) - set(want)
if extra:
    print(f"jobs not in the crontab: {sorted(extra)}", file=sys.stderr)
    print(0)
    sys.exit(0)
ok = 0
for cmd, runs in want.items():
    if got.get(cmd) == runs:
        ok += 1
    else:
        print(f"{cmd}: want {runs} got {got.get(cmd)}", file=sys.stderr)
print(f"{ok}/{len(want)} jobs right", file=sys.stderr)
print(ok / len(want))
