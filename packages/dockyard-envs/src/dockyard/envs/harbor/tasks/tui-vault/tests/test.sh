#!/bin/bash
cd /app
pin=$(cat pin.txt)
want=$(python3 -c "import hashlib,sys; print(hashlib.sha256(('vault:' + sys.argv[1]).encode()).hexdigest())" "$pin")
if [ "$(cat unlocked.txt 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
