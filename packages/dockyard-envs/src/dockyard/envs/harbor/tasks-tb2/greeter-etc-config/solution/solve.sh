#!/bin/bash
set -euo pipefail
while read -r n; do greeter "$n"; done < /app/names.txt > /app/greetings.txt
echo /etc/greeter/greeter.conf > /app/config_path.txt
