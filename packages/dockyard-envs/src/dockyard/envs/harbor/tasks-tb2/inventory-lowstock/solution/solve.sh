#!/bin/bash
set -euo pipefail
t=$(stockctl threshold)
stockctl list | awk -v t="$t" '$2 < t {print $1}' | sort > /app/lowstock.txt
