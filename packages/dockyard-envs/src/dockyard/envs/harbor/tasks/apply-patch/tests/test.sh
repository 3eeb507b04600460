#!/bin/bash
# Behaviour, not text: the held-out checks import /app/textkit and exercise every change of the
# patch plus the features the tree gained after the patch was written.
cd /app
n=$(timeout 30 python3 -B /tests/behaviour.py 2>/logs/verifier/check.err | tail -n 1)
if [ "$n" = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
