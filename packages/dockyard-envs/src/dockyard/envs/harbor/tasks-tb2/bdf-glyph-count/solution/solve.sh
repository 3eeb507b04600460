#!/bin/bash
set -euo pipefail
{ echo font,glyphs; for f in $(ls /fonts/*.bdf | sort); do echo "$(basename "$f"),$(grep -c '^STARTCHAR' "$f")"; done; } > /app/glyphs.csv
