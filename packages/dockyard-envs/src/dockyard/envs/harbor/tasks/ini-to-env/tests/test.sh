#!/bin/bash
# The expected variables are recomputed from a pristine copy of the INI held out in /tests, and
# /app/.env is checked by sourcing it in bash (behaviour, not text).
python3 /tests/check.py > /logs/verifier/reward.txt 2>/logs/verifier/check.err || echo 0 > /logs/verifier/reward.txt
