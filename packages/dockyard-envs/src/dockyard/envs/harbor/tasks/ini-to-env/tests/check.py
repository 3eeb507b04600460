"""Check /app/.env against the rules, from the pristine INI kept in /tests.

Expected variables come from a reference parser of /tests/app.ini. The file must hold exactly
one `NAME=...` line per variable, sorted by name; its values are checked by behaviour: bash
sources it (`set -a; . /app/.env`) in an empty environment and every variable must come out
exactly equal to the expected value."""

import json
import re
import subprocess
import sys


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        cut = min(i for i in (line.find("="), line.find(":"), len(line)) if i >= 0)
        key, value = line[:cut].strip(), line[cut + 1 :].strip()
        if value[:1] in ("'", '"') and value.find(value[0], 1) > 0:
            value = value[1 : value.find(value[0], 1)]
        else:
            value = re.split(r"\s[;#]", value, maxsplit=1)[0].strip()
        name = re.sub(r"[^A-Z0-9]+", "_", (f"{section}_{key}" if section else key).upper())
        out[name] = value
    return out


with open("/tests/app.ini", encoding="utf-8") as f:
    want = parse(f.read())
print(json.dumps(want, ensure_ascii=False, indent=1), file=sys.stderr)
try:
    with open("/app/.env", encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
except (OSError, UnicodeDecodeError):
    lines = []
names = [m.group(1) for m in (re.match(r"([A-Z0-9_]+)=", ln) for ln in lines) if m]
ok = len(names) == len(lines) and names == sorted(want)
if ok:
    script = f"set -a; . /app/.env; exec {sys.executable} -c 'import json,os; print(json.dumps(dict(os.environ)))'"
    r = subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", "-c", script],
        env={},
        capture_output=True,
        text=True,
        timeout=20,
    )
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    bad = [k for k in want if got.get(k) != want[k]]
    print("wrong values:", bad, file=sys.stderr)
    ok = r.returncode == 0 and not bad
else:
    print("names/lines:", names, file=sys.stderr)
print(1 if ok else 0)
