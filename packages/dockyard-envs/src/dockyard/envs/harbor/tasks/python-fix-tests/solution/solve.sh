#!/bin/bash
cd /app
python3 - <<'EOF'
p = "semverlite/version.py"
s = open(p).read()
# the core parts were kept as strings ("10" < "9"): store ints
for part in ("major", "minor", "patch"):
    s = s.replace(f'self.{part} = m["{part}"]', f'self.{part} = int(m["{part}"])')
# precedence: a release above its pre-releases; numeric identifiers numerically, below alphanumerics
s = s.replace('''    def _key(self):
        return (self.major, self.minor, self.patch, self.prerelease)
''', '''    def _key(self):
        pre = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)
''')
open(p, "w").write(s)
EOF
python3 -m unittest -q 2>&1 | tail -1
