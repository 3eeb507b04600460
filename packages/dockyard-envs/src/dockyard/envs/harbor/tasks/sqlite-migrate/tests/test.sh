#!/bin/bash
cd /app
python3 /tests/make_db.py /tmp/pristine.db
python3 /tests/check.py /tmp/pristine.db app.db > /logs/verifier/reward.txt 2>/logs/verifier/check.err || echo 0 > /logs/verifier/reward.txt
