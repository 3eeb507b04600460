#!/bin/bash
cd /app
python3 - <<'PY'
import calendar
import json
import re
from datetime import datetime, timedelta

NAMES = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
NAMES_MON = {n.lower(): i for i, n in enumerate(calendar.month_abbr) if n}
MACRO = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
         "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
         "@hourly": "0 * * * *"}
BOUNDS = [(0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, NAMES_MON), (0, 7, NAMES)]


def num(s, lo, hi, names):
    v = names[s.lower()] if s.lower() in names else int(s) if s.isdigit() else None
    if v is None or not lo <= v <= hi:
        raise ValueError(s)
    return v


def expand(text, lo, hi, names):
    vals = set()
    for item in text.split(","):
        m = re.fullmatch(r"(\*|[^-/]+(?:-[^-/]+)?)(?:/(\d+))?", item)
        if not m or (m.group(2) is not None and int(m.group(2)) == 0):
            raise ValueError(item)
        step = int(m.group(2) or 1)
        if m.group(1) == "*":
            a, b = lo, hi
        elif "-" in m.group(1):
            a, b = (num(x, lo, hi, names) for x in m.group(1).split("-"))
            if a > b:
                raise ValueError(item)
        else:
            a = num(m.group(1), lo, hi, names)
            b = hi if m.group(2) else a
        vals |= set(range(a, b + 1, step))
    return vals


def runs(spec, start, n=5):
    f = spec.split()
    try:
        sets = [expand(t, lo, hi, nm) for t, (lo, hi, nm) in zip(f, BOUNDS)]
    except ValueError:
        return []
    sets[4] = {d % 7 for d in sets[4]}
    either = f[2][0] != "*" and f[4][0] != "*"
    t = (start + timedelta(minutes=1)).replace(second=0)
    limit = start.replace(year=start.year + 50)
    out = []
    while len(out) < n and t < limit:
        dom_ok, dow_ok = t.day in sets[2], t.isoweekday() % 7 in sets[4]
        day_ok = t.month in sets[3] and ((dom_ok or dow_ok) if either else (dom_ok and dow_ok))
        if not day_ok:
            t = (t + timedelta(days=1)).replace(hour=0, minute=0)
            continue
        if t.hour not in sets[1]:
            t = (t + timedelta(hours=1)).replace(minute=0)
            continue
        if t.minute in sets[0]:
            out.append(t.strftime("%Y-%m-%d %H:%M"))
        t += timedelta(minutes=1)
    return out


start = datetime(2025, 3, 8, 23, 59, 30)
result = {}
for line in open("crontab"):
    line = line.strip()
    if not line or line.startswith("#") or re.match(r"\w+\s*=", line):
        continue
    if line.startswith("@"):
        macro, cmd = line.split(None, 1)
        spec = MACRO.get(macro, "x")
    else:
        *fields, cmd = line.split(None, 5)
        spec = " ".join(fields)
    result[cmd.strip()] = runs(spec, start)
json.dump(result, open("next_runs.json", "w"), indent=2)
PY
