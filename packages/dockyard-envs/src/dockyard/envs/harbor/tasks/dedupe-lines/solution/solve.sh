#!/bin/bash
cd /app
python3 - <<'PY'
import re, unicodedata

def norm_name(s):
    s = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))
    return " ".join(s.casefold().split())

seen, out = set(), []
with open("data/contacts.txt", encoding="utf-8", newline="") as f:
    for line in f:
        line = line.rstrip("\n").removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, email, phone = (x.strip() for x in line.split("|"))
        digits = re.sub(r"\D", "", phone)
        if len(digits) == 11 and digits[0] == "1":
            digits = digits[1:]
        k = (norm_name(name), email.lower(), digits)
        if k not in seen:
            seen.add(k)
            out.append(line)
open("unique.txt", "w", encoding="utf-8", newline="").write("".join(l + "\n" for l in out))
PY
