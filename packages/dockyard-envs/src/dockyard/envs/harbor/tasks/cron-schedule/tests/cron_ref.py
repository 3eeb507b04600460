"""Held-out reference: the next run times of each job of a crontab (Vixie semantics)."""

import datetime as dt
import re

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _value(tok: str, lo: int, hi: int, names: list[str] | None) -> int:
    if names and tok.lower() in names:
        return names.index(tok.lower()) + (1 if names is MONTHS else 0)
    if not re.fullmatch(r"[0-9]+", tok):
        raise ValueError(tok)
    v = int(tok)
    if not lo <= v <= hi:
        raise ValueError(tok)
    return v


def field(text: str, lo: int, hi: int, names: list[str] | None = None) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        s = int(step) if step else 1
        if (step and not re.fullmatch(r"[0-9]+", step)) or s < 1:
            raise ValueError(part)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            x, y = rng.split("-", 1)
            a, b = _value(x, lo, hi, names), _value(y, lo, hi, names)
            if a > b:
                raise ValueError(part)
        else:
            a = _value(rng, lo, hi, names)
            b = hi if step else a
        out.update(range(a, b + 1, s))
    return out


def parse(line: str) -> tuple[str, str] | None:
    s = line.strip()
    if not s or s.startswith("#") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*=", s):
        return None
    if s.startswith("@"):
        macro, _, cmd = s.partition(" ")
        return MACROS.get(macro, "invalid"), cmd.strip()
    parts = s.split(None, 5)
    return " ".join(parts[:5]), parts[5].strip()


def next_runs(sched: str, after: dt.datetime, n: int = 5, years: int = 50) -> list[str]:
    try:
        m, h, dom, mon, dow = sched.split()
        mins, hours = field(m, 0, 59), field(h, 0, 23)
        doms, mons = field(dom, 1, 31), field(mon, 1, 12, MONTHS)
        dows = {d % 7 for d in field(dow, 0, 7, DAYS)}
    except ValueError:
        return []
    both = not dom.startswith("*") and not dow.startswith("*")
    out: list[str] = []
    day = after.date()
    end = day.replace(year=day.year + years)
    while day <= end and len(out) < n:
        if day.month in mons:
            a, b = day.day in doms, (day.weekday() + 1) % 7 in dows
            if (a or b) if both else (a and b):
                for hh in sorted(hours):
                    for mm in sorted(mins):
                        t = dt.datetime(day.year, day.month, day.day, hh, mm)
                        if t > after and len(out) < n:
                            out.append(t.strftime("%Y-%m-%d %H:%M"))
        day += dt.timedelta(days=1)
    return out


def schedule(crontab: str, after: dt.datetime) -> dict[str, list[str]]:
    jobs = {}
    for line in crontab.splitlines():
        p = parse(line)
        if p:
            jobs[p[1]] = next_runs(p[0], after)
    return jobs
