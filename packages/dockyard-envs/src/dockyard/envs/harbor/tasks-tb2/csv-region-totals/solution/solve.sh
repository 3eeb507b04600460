#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import csv, json
tot = {}
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        tot[row["region"]] = tot.get(row["region"], 0.0) + float(row["amount"])
with open("/app/totals.json", "w") as f:
    json.dump({k: round(tot[k], 2) for k in sorted(tot)}, f, indent=2)
EOF
