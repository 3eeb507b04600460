#!/bin/bash
cd /app
make clean >/dev/null 2>&1
if make >/logs/verifier/make.log 2>&1 && [ "$(./calc 2 + 3)" = 5 ] && [ "$(./calc 7 '*' 6)" = 42 ] \
   && [ "$(./calc 9 - 11)" = -2 ] && grep -q 'long apply' src/ops.c; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
