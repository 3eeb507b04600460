#!/bin/bash
cd /app
python3 - <<'PY'
import collections, ipaddress, re

valid = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "((?:[^"\\]|\\.)*)" (\d{3}) (\d+|-) '
                   r'"((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$')
ips, codes = collections.Counter(), collections.Counter()
with open("logs/access.log") as f:
    for line in f:
        m = valid.match(line.rstrip("\n"))
        if not m:
            continue
        req = m.group(2).split()
        if len(req) >= 2 and req[1].split("?")[0] == "/healthz":
            continue
        ips[m.group(1)] += 1
        codes[int(m.group(3))] += 1
top = sorted(ips.items(), key=lambda kv: (-kv[1], ipaddress.ip_address(kv[0])))[:10]
with open("report.txt", "w") as out:
    out.write("TOP 10 CLIENTS\n")
    out.writelines(f"{n} {ip}\n" for ip, n in top)
    out.write("STATUS CODES\n")
    out.writelines(f"{c} {n}\n" for c, n in sorted(codes.items()))
PY
