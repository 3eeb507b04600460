#!/bin/bash
cd /app
python3 - <<'PY'
import glob, re

addr = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])")
found = set()
for path in sorted(glob.glob("inbox/*.txt")):
    for a in addr.findall(open(path, encoding="utf-8").read()):
        local, domain = a.lower().split("@")
        local = local.split("+", 1)[0]
        domain = "gmail.com" if domain == "googlemail.com" else domain
        if domain == "gmail.com":
            local = local.replace(".", "")
        found.add((domain, local))
open("emails.txt", "w").write("".join(f"{l}@{d}\n" for d, l in sorted(found)))
PY
