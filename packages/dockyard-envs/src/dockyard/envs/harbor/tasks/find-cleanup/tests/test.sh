#!/bin/bash
cd /app
python3 /tests/check.py > /logs/verifier/reward.txt 2>/logs/verifier/check.err || echo 0 > /logs/verifier/reward.txt
