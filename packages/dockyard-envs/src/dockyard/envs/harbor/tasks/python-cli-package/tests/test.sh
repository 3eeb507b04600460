#!/bin/bash
python3 /tests/check.py > /logs/verifier/reward.txt 2> /logs/verifier/check.log || echo 0 > /logs/verifier/reward.txt
