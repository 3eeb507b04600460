#!/bin/bash
cd /app
git bisect start main v1.0 >/dev/null
git bisect run ./check.sh > /tmp/bisect.out 2>&1
git rev-parse refs/bisect/bad > FIRST_BAD
git bisect reset >/dev/null 2>&1
cat FIRST_BAD
