"""Recompute the report from the pristine log (tests/gen.py) and compare with /app/report.txt."""

import collections
import ipaddress
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

ips, codes = collections.Counter(), collections.Counter()
for line in gen.build()["logs/access.log"].decode().split("\n"):
    m = gen.VALID.match(line)
    if not m:
        continue
    parts = m.group(2).split()
    if len(parts) >= 2 and parts[1].split("?", 1)[0] == "/healthz":
        continue
    ips[m.group(1)] += 1
    codes[int(m.group(3))] += 1
top = sorted(ips.items(), key=lambda kv: (-kv[1], ipaddress.IPv4Address(kv[0])))[:10]
want = ["TOP 10 CLIENTS"] + [f"{n} {ip}" for ip, n in top] + ["STATUS CODES"]
want += [f"{c} {n}" for c, n in sorted(codes.items())]
try:
    with open("/app/report.txt", encoding="utf-8") as f:
        got = [ln.rstrip() for ln in f.read().strip("\n").split("\n")]
except (OSError, UnicodeDecodeError):
    got = []
print(1 if got == want else 0)
