#!/bin/bash
set -euo pipefail
while read -r a; do echo "$a $(ledger-balance "$a")"; done < /app/accounts.txt > /app/balances.txt
stat -c %U /var/lib/ledger > /app/owner.txt
