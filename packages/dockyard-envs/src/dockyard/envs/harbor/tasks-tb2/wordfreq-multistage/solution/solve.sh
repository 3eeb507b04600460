#!/bin/bash
set -euo pipefail
python3 /usr/local/bin/wordfreq.pyz /app/essay.txt 5 | awk '{print $2}' > /app/top5.txt
