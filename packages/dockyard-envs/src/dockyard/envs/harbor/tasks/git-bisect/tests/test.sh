#!/bin/bash
# The builds are deterministic (fixed identities and dates), so the hashes are known in advance.
# 1.0: the right first bad commit and the repository left as found; 0.5: right commit only.
cd /app
FIRST_BAD=487c26d9ca70b3184ed2f80279d35b812276c804
TIP=e747a7eba5a93b09aaa26fea9966f081e59d2bf7
got=$(tr -d '[:space:]' < FIRST_BAD 2>/dev/null)
if [ "$got" != "$FIRST_BAD" ]; then
  echo "FIRST_BAD: got '$got'" > /logs/verifier/detail.txt
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
clean=1
[ "$(git symbolic-ref -q HEAD)" = refs/heads/main ] || clean=0
[ "$(git rev-parse -q --verify refs/heads/main)" = "$TIP" ] || clean=0
[ -e "$(git rev-parse --git-path BISECT_LOG)" ] && clean=0
git diff --quiet HEAD -- || clean=0
if [ $clean = 1 ]; then echo 1; else echo 0.5; fi > /logs/verifier/reward.txt
