"""Generate /app/logs/app.log, app.log.1 and app.log.2.gz (deterministic): rotated application
logs whose timestamps carry different UTC offsets, with multi-line stack traces, INFO lines that
mention ERROR, and planted error bursts (one tie among the top minutes)."""

import datetime as dt
import gzip
import random
import re

UTC = dt.UTC
RECORD = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (\S+) ")
START = dt.datetime(2024, 3, 14, 8, 0, tzinfo=UTC)
ROT1 = dt.datetime(2024, 3, 14, 9, 12, 45, tzinfo=UTC)  # app.log.2.gz | app.log.1
ROT2 = dt.datetime(2024, 3, 14, 10, 17, 30, tzinfo=UTC)  # app.log.1 | app.log
OFFSET_SWITCH = dt.datetime(2024, 3, 14, 11, 2, 0, tzinfo=UTC)  # app.log: Z, then +01:00
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
CET = dt.timezone(dt.timedelta(hours=1))
COMPONENTS = ["api", "payments", "db", "auth", "worker", "cache"]
MESSAGES = {
    "DEBUG": ["cache lookup key=user:{n}", "query plan chosen idx_{n}"],
    "INFO": [
        "request served in {n} ms",
        "user {n} logged in",
        "job {n} done",
        "retrying after ERROR from upstream (attempt {n})",
        "ERROR budget at {n}%",
    ],
    "WARN": ["slow query {n} ms", "pool at {n}% capacity"],
    "ERROR": [
        "upstream timeout after {n} ms",
        "payment {n} declined by gateway",
        "unhandled exception in handler",
    ],
    "FATAL": ["worker {n} crashed"],
}
TRACE = [
    "Traceback (most recent call last):",
    '  File "/srv/app/handlers.py", line {n}, in handle',
    "    raise OperationalError(msg)",
    "psycopg.OperationalError: ERROR:  deadlock detected",
]
# planted UTC minutes -> total ERROR records wanted in that minute
TARGETS = {
    "2024-03-14T10:17": 34,
    "2024-03-14T08:43": 27,
    "2024-03-14T11:05": 27,
    "2024-03-14T09:58": 26,
}


def minute(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def build() -> dict[str, bytes]:
    rng = random.Random(1403)
    recs = []  # (utc time, level, continuation lines)
    levels = ["INFO"] * 70 + ["DEBUG"] * 15 + ["WARN"] * 10 + ["ERROR"] * 4 + ["FATAL"]
    for _ in range(7000):
        t = START + dt.timedelta(seconds=rng.uniform(0, 4 * 3600))
        recs.append((t, rng.choice(levels)))
    per_min: dict[str, int] = {}
    for t, lvl in recs:
        if lvl == "ERROR":
            per_min[minute(t)] = per_min.get(minute(t), 0) + 1
    assert max(per_min.values()) < 20
    for m, total in TARGETS.items():
        base = dt.datetime.strptime(m, "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
        for _ in range(total - per_min.get(m, 0)):
            recs.append((base + dt.timedelta(seconds=rng.uniform(0, 59.999)), "ERROR"))
    # decoy: a burst of INFO lines that mention ERROR
    for _ in range(45):
        base = dt.datetime(2024, 3, 14, 11, 40, tzinfo=UTC)
        recs.append((base + dt.timedelta(seconds=rng.uniform(0, 59.9)), "INFO"))
    recs.sort(key=lambda r: r[0])
    files: dict[str, list[str]] = {"app.log.2.gz": [], "app.log.1": [], "app.log": []}
    for t, lvl in recs:
        if t < ROT1:
            name, local = "app.log.2.gz", t.astimezone(IST)
        elif t < ROT2:
            name, local = "app.log.1", t
        else:
            name, local = "app.log", (t if t < OFFSET_SWITCH else t.astimezone(CET))
        stamp = local.isoformat(timespec="milliseconds" if rng.random() < 0.7 else "seconds")
        stamp = stamp.replace("+00:00", "Z")
        msg = rng.choice(MESSAGES[lvl])
        if lvl == "INFO" and t.hour == 11 and t.minute == 40:
            msg = "retrying after ERROR from upstream (attempt {n})"
        line = f"{stamp} {lvl} [{rng.choice(COMPONENTS)}] {msg.format(n=rng.randint(1, 999))}"
        files[name].append(line)
        if lvl == "ERROR" and rng.random() < 0.3:
            files[name] += [x.format(n=rng.randint(10, 400)) for x in TRACE]
    out = {}
    for name, lines in files.items():
        data = ("\n".join(lines) + "\n").encode()
        out["logs/" + name] = gzip.compress(data, mtime=0) if name.endswith(".gz") else data
    return out


def utc_minute(stamp: str) -> str:
    """The UTC minute `YYYY-MM-DDTHH:MM` of an ISO-8601 timestamp with `Z` or `+hh:mm`."""
    return minute(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")))


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
