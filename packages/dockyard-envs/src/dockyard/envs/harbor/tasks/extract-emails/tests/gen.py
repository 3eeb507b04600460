"""Generate /app/inbox/*.txt (deterministic): messy mail/chat exports mentioning addresses in
many spellings (case, +tags, gmail dots, googlemail, mailto:, <...>, trailing punctuation) plus
look-alikes that are not addresses."""

import random
import re

ADDR = re.compile(
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])"
)
USERS = [
    "alice",
    "bob.smith",
    "carol_w",
    "dave",
    "eve.adams",
    "frank99",
    "grace.hopper",
    "heidi-k",
    "ivan",
    "judy.o",
    "mallory",
    "niaj",
    "olivia.p",
    "peggy",
    "rupert.b",
    "sybil",
    "trent",
    "victor.l",
    "walter",
    "zoe.q",
]
DOMAINS = [
    "example.com",
    "example.org",
    "mail.example.co.uk",
    "corp-mail.net",
    "gmail.com",
    "uni.example.edu",
    "startup.io",
    "example.com.au",
    "post.example.de",
]
FILLER = [
    "Grüße aus Köln —",
    "Re: Ångström units",
    "¿Qué tal?",
    "meeting moved to 10:30",
    "see ticket #4521",
    "naïve café résumé",
    "price: 12,50 €",
    "→ forwarded",
    "ok 👍",
    "deadline 2024-05-01.",
    "cc the team",
]
DECOYS = [
    "admin@localhost",
    "root@server",
    "x@y.c",
    "user@192.168.0.1",
    "@handle",
    "grace [at] example [dot] com",
    "name(at)example.org",
    "foo@bar..com",
    "a@b",
    "joe@@example.com",
]


def _spell(rng: random.Random, user: str, domain: str) -> str:
    local = user
    if domain == "gmail.com":
        if rng.random() < 0.5:
            local = (
                local.replace(".", "") if rng.random() < 0.5 else ".".join(local.replace(".", ""))
            )
        if rng.random() < 0.3:
            domain = "googlemail.com"
    if rng.random() < 0.3:
        local += "+" + rng.choice(["news", "spam", "x1", "shop.eu"])
    addr = f"{local}@{domain}"
    r = rng.random()
    if r < 0.2:
        addr = addr.upper()
    elif r < 0.4:
        addr = local + "@" + domain.title()
    return addr


def _wrap(rng: random.Random, addr: str) -> str:
    return rng.choice(
        [
            f"<{addr}>",
            f"mailto:{addr}?subject=hi",
            f"({addr})",
            f"{addr}.",
            f"{addr},",
            f'"{addr}"',
            f"{addr};",
            addr,
            addr,
            f"e-mail:{addr}",
            f"[{addr}]",
        ]
    )


def build() -> dict[str, bytes]:
    rng = random.Random(5150)
    people = [(u, d) for u in USERS for d in DOMAINS if rng.random() < 0.3]
    out = {}
    for n in range(1, 7):
        lines = []
        for _ in range(rng.randint(40, 70)):
            parts = [rng.choice(FILLER) for _ in range(rng.randint(1, 3))]
            for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
                parts.insert(
                    rng.randint(0, len(parts)), _wrap(rng, _spell(rng, *rng.choice(people)))
                )
            if rng.random() < 0.15:
                parts.insert(rng.randint(0, len(parts)), rng.choice(DECOYS))
            lines.append(" ".join(parts))
        sep = "\r\n" if n % 3 == 0 else "\n"
        out[f"inbox/thread-{n:02d}.txt"] = (sep.join(lines) + sep).encode()
    return out


def normalise(addr: str) -> str:
    local, domain = addr.lower().split("@")
    local = local.split("+", 1)[0]
    if domain == "googlemail.com":
        domain = "gmail.com"
    if domain == "gmail.com":
        local = local.replace(".", "")
    return f"{local}@{domain}"


def expected(files: dict[str, bytes]) -> list[str]:
    found = {normalise(a) for data in files.values() for a in ADDR.findall(data.decode())}
    return sorted(found, key=lambda a: (a.split("@")[1], a.split("@")[0]))


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
