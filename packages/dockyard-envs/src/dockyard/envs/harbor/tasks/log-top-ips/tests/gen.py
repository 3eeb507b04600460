"""Generate /app/logs/access.log (deterministic): a web server's Combined Log Format access log
with health checks, ties on the top-10 boundary, `"-"` requests, escaped quotes and truncated
records."""

import datetime
import random
import re

VALID = re.compile(
    r'^(\S+) \S+ \S+ \[[^\]]+\] "((?:[^"\\]|\\.)*)" (\d{3}) (\d+|-) '
    r'"((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$'
)
PATHS = [
    "/",
    "/index.html",
    "/api/v1/items",
    "/api/v1/items/42",
    "/login",
    "/static/app.js",
    "/static/style.css",
    "/search?q=red+shoes",
    "/cart",
    "/healthz/deep",
    "/favicon.ico",
    "/api/v1/users/7/orders?page=2",
    "/robots.txt",
    "/admin",
]
AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0",
    "curl/8.4.0",
    'Mozilla/5.0 (compatible; \\"FancyBot\\" 2.1; +http://bot.example/)',
    "python-requests/2.31.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1) Safari/604.1",
]
STATUSES = [200] * 30 + [304] * 5 + [301, 302, 404, 404, 404, 403, 500, 502, 201, 204]
START = datetime.datetime(2024, 3, 11, 6, 25, 0)


def build() -> dict[str, bytes]:
    rng = random.Random(20240311)
    # counts of *counted* requests (valid, not health checks) per client
    counts = {
        "203.0.113.7": 97,
        "198.51.100.23": 88,
        "10.0.0.2": 12,
        "192.0.2.44": 80,
        "52.14.201.9": 75,
        "34.201.11.250": 71,
        "8.8.4.4": 66,
        "10.0.0.10": 60,
        "10.0.0.9": 60,
        "9.12.4.1": 60,
        "172.16.0.200": 60,
        "172.16.0.31": 60,
        "100.64.3.3": 55,
        "2.2.2.2": 54,
        "192.0.2.5": 54,
    }
    for _ in range(45):
        counts[
            f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}."
            f"{rng.randint(1, 254)}"
        ] = rng.randint(1, 50)
    records = []
    for ip, n in counts.items():
        for _ in range(n):
            if rng.random() < 0.04:
                req, status = "-", 400
            else:
                method = rng.choice(["GET"] * 8 + ["POST", "HEAD"])
                path = rng.choice(PATHS)
                req, status = f"{method} {path} HTTP/1.1", rng.choice(STATUSES)
            records.append((ip, req, status))
    # health checks: many, from the load balancer and a monitor; never counted
    for _ in range(420):
        ip = "10.0.0.2" if rng.random() < 0.8 else "10.0.0.9"
        q = rng.choice(["", "", "?probe=lb", "?full=1"])
        records.append((ip, f"GET /healthz{q} HTTP/1.1", rng.choice([200, 200, 200, 503])))
    rng.shuffle(records)
    lines = []
    for i, (ip, req, status) in enumerate(records):
        user = rng.choice(["-"] * 9 + ["frank"])
        t = (START + datetime.timedelta(seconds=37 * i)).strftime("%d/%b/%Y:%H:%M:%S +0000")
        size = "-" if status in (204, 304) else str(rng.randint(120, 90000))
        ref = rng.choice(["-", "-", "https://shop.example/", "https://shop.example/cart"])
        line = f'{ip} - {user} [{t}] "{req}" {status} {size} "{ref}" "{rng.choice(AGENTS)}"'
        assert VALID.match(line), line
        lines.append(line)
        if rng.random() < 0.03:  # a truncated write (disk full / rotation race)
            bad_ip = rng.choice(["9.12.4.1", "172.16.0.200", "10.0.0.10", ip])
            cut = f'{bad_ip} - - [{t}] "GET /index.html HTTP/1.1" 200 {size} "-" "Mozi'
            cut = cut[: rng.randint(len(bad_ip) + 5, len(cut) - 1)]
            assert not VALID.match(cut)
            lines.append(cut)
        if rng.random() < 0.005:
            lines.append("")
    return {"logs/access.log": ("\n".join(lines) + "\n").encode()}


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
