#!/bin/bash
# Held-out checks: the shipped Makefile is put back (the task says it is correct), the project
# must build, then reward = the fraction of held-out cases (stdout, stderr, exit status) that
# match, at -O0 (the Makefile's flags) and again at -O2.
cd /app
L=/logs/verifier/log.txt
cp /tests/Makefile.orig Makefile
pass=0; total=0
run_cases() { # LABEL
  for c in /tests/cases/*.in; do
    b=${c%.in}; total=$((total + 1))
    # shellcheck disable=SC2046
    timeout 10 ./inventory $(cat "$b.args") "$c" > /tmp/out 2> /tmp/err; rc=$?
    if cmp -s /tmp/out "$b.out" && cmp -s /tmp/err "$b.err" && [ "$rc" = "$(cat "$b.rc")" ]; then
      pass=$((pass + 1)); echo "ok   $1 $(basename "$b")" >> "$L"
    else
      echo "FAIL $1 $(basename "$b") (exit $rc)" >> "$L"; diff /tmp/out "$b.out" >> "$L"; diff /tmp/err "$b.err" >> "$L"
    fi
  done
}
make clean >> "$L" 2>&1
if ! make >> "$L" 2>&1 || [ ! -x inventory ]; then
  echo "FAIL the project does not build with the shipped Makefile" >> "$L"
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
run_cases O0
make clean >> "$L" 2>&1
if make CFLAGS='-std=c11 -O2 -Wall -Wextra -Werror=implicit-function-declaration' >> "$L" 2>&1; then
  run_cases O2
else
  echo "FAIL the project does not build at -O2" >> "$L"; total=$((total * 2))
fi
python3 -c "print(round($pass / $total, 4))" > /logs/verifier/reward.txt
