#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import locale
locale.setlocale(locale.LC_NUMERIC, "de_DE.UTF-8")
with open("/app/prices.txt") as f, open("/app/prices_de.txt", "w") as out:
    for line in f:
        out.write(locale.format_string("%.2f", float(line), grouping=True) + "\n")
EOF
