#!/bin/bash
cd /app
ok=1
want=$(printf '[db]\nhost = db.internal\nport = 6543\nuser = app')
[ "$(cat config/secrets.example.ini 2>/dev/null)" = "$want" ] || ok=0
[ "$(git log -1 --format=%s 2>/dev/null)" = "restore secrets example" ] || ok=0
git diff --quiet HEAD -- config/secrets.example.ini 2>/dev/null || ok=0
[ "$(git rev-list --count HEAD 2>/dev/null)" = 5 ] || ok=0
echo $ok > /logs/verifier/reward.txt
