#!/bin/bash
cd /app
python3 - <<'PY'
import re

env, section = {}, ""
for raw in open("config/app.ini", encoding="utf-8"):
    line = raw.strip()
    if not line or line[0] in ";#":
        continue
    if line.startswith("[") and line.endswith("]"):
        section = line[1:-1].strip()
        continue
    m = re.match(r"([^=:]*)[=:](.*)", line)
    key, value = m.group(1).strip(), m.group(2).strip()
    q = value[:1]
    if q in "'\"" and q and value.find(q, 1) > 0:
        value = value[1:value.find(q, 1)]
    else:
        value = re.split(r"\s[;#]", value, maxsplit=1)[0].strip()
    env[re.sub(r"[^A-Z0-9]+", "_", (section + "_" + key if section else key).upper())] = value

def quote(v):
    return v if re.fullmatch(r"[A-Za-z0-9_./:@,+-]*", v) else "'" + v.replace("'", "'\\''") + "'"

open(".env", "w", encoding="utf-8").write("".join(f"{k}={quote(v)}\n" for k, v in sorted(env.items())))
PY
