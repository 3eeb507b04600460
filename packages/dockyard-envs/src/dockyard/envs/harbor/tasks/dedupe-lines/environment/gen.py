"""Generate /app/data/contacts.txt (deterministic): `name | email | phone` records where many are
re-spellings of an earlier record (case, accents precomposed/decomposed/stripped, ß/ss,
ligatures, spacing, e-mail case, phone punctuation and +1 prefix), near-misses that are NOT
duplicates, comments, blank lines and some CRLF endings."""

import random
import re
import unicodedata

FIRST = [
    "José",
    "Zoë",
    "Renée",
    "André",
    "Björn",
    "Ståle",
    "Sofia",
    "Fiona",
    "Chloé",
    "Dana",
    "Łukasz",
    "Ines",
    "Noël",
    "Amélie",
    "Jürgen",
    "Ana",
    "Liam",
    "Mia",
    "Éowyn",
    "Kai",
]
LAST = [
    "García",
    "Weiß",
    "Müller",
    "O'Neil",
    "Dvořák",
    "Nuñez",
    "Smith",
    "Lefèvre",
    "Søren",
    "Brontë",
    "Kowalski",
    "Rossi",
    "Tanaka",
    "Nguyễn",
    "Strauss",
    "Ölund",
]


def _strip(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


def _respell_name(rng: random.Random, name: str) -> str:
    r = rng.random()
    if r < 0.2:
        name = name.upper()
    elif r < 0.35:
        name = name.lower()
    elif r < 0.5:
        name = unicodedata.normalize("NFD", name)
    elif r < 0.6:
        name = _strip(name)
    name = name.replace("ß", rng.choice(["ß", "ss", "SS"])).replace("fi", rng.choice(["fi", "ﬁ"]))
    if rng.random() < 0.3:
        name = name.replace(" ", rng.choice(["  ", "\t", " \u00a0"]))
    return rng.choice(["", " ", "  "]) + name + rng.choice(["", " "])


def _phone(rng: random.Random, digits: str) -> str:
    a, b, c = digits[:3], digits[3:6], digits[6:]
    return rng.choice(
        [
            f"({a}) {b}-{c}",
            f"{a}.{b}.{c}",
            f"+1 {a} {b} {c}",
            f"1{a}{b}{c}",
            f"{a}-{b}-{c}",
            f"{a}{b}{c}",
            f"+1-{a}-{b}-{c}",
        ]
    )


def build() -> dict[str, bytes]:
    rng = random.Random(909)
    people = []
    for _ in range(220):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{_strip(first).lower()}.{_strip(last).lower().replace(' ', '')}{rng.randint(1, 99)}@example.com"
        people.append(
            (
                f"{first} {last}",
                re.sub(r"[^a-z0-9.@]", "", email),
                f"555{rng.randint(0, 9999999):07d}",
            )
        )
    lines = ["# contacts export — merged from CRM and the old address book", ""]
    for i in range(700):
        if i < 60 or rng.random() < 0.45:
            name, email, phone = rng.choice(people)
        else:
            name, email, phone = rng.choice(people[: max(1, i // 3)])
            name = _respell_name(rng, name)
            if rng.random() < 0.4:
                email = rng.choice([email.upper(), email.title(), f" {email} "])
            if rng.random() < 0.08:  # a near miss: same person, different phone -> kept
                phone = phone[:-1] + str((int(phone[-1]) + 1) % 10)
        sep = rng.choice([" | ", "|", " |  ", "\t| "])
        line = f"{name}{sep}{email}{sep}{_phone(rng, phone)}" + rng.choice(["", "", "", " "])
        lines.append(line)
        if rng.random() < 0.03:
            lines.append(rng.choice(["", "# --- page break ---", "   "]))
    data = "".join(ln + ("\r\n" if rng.random() < 0.2 else "\n") for ln in lines)
    return {"data/contacts.txt": data.encode()}


def key(line: str) -> tuple[str, str, str]:
    name, email, phone = (f.strip() for f in line.split("|"))
    name = " ".join(_strip(name).casefold().split())
    digits = re.sub(r"\D", "", phone)
    if len(digits) == 11 and digits.startswith("1"):
        digits = digits[1:]
    return name, email.lower(), digits


def expected(data: bytes) -> list[str]:
    seen, out = set(), []
    for line in data.decode().split("\n"):
        line = line.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        k = key(line)
        if k not in seen:
            seen.add(k)
            out.append(line)
    return out


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
