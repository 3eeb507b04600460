#!/bin/bash
cd /app
python3 - <<'PY'
import collections, datetime as dt, glob, gzip, re

rec = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) (\S+) ")
counts = collections.Counter()
for path in glob.glob("logs/app.log*"):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            m = rec.match(line)
            if m and m.group(2) == "ERROR":
                t = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
                counts[t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M")] += 1
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
open("answer.txt", "w").write("".join(f"{m} {n}\n" for m, n in top))
PY
