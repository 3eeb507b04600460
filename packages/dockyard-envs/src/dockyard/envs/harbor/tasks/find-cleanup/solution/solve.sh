#!/bin/bash
set -e
cd /app/data
find . -type f \( -name '*.tmp' -o -size 0 \) -delete
# -size +50000c is "more than 50000 bytes"; ! -newermt keeps mtime <= cutoff, so exclude == cutoff
touch -d '2023-01-01 00:00:00 UTC' /tmp/cutoff
find . -path ./keep -prune -o -type f -size +50000c ! -newer /tmp/cutoff -print0 |
  while IFS= read -r -d '' f; do
    [ "$(stat -c %Y -- "$f")" -lt "$(stat -c %Y /tmp/cutoff)" ] || continue
    mkdir -p -- "/app/archive/$(dirname -- "$f")"
    mv -- "$f" "/app/archive/$f"
  done
