#!/bin/bash
# Drive the program through a terminal of our own (tmux), as an agent would with keystrokes.
cd /app
sock=/tmp/solve.sock
tmux -f /dev/null -S $sock new-session -d -s v -x 80 -y 24 "python3 vault.py; sleep 2"
sleep 1
tmux -S $sock send-keys -t v Down Down Enter
sleep 0.5
tmux -S $sock send-keys -t v "$(cat pin.txt)" Enter
for _ in $(seq 50); do [ -f unlocked.txt ] && break; sleep 0.1; done
tmux -S $sock kill-server 2>/dev/null
test -f unlocked.txt
