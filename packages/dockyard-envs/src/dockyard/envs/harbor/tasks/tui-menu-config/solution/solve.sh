#!/bin/bash
# Drive the curses program through a terminal of our own (tmux), as an agent would with keys.
cd /app
sock=/tmp/solve-settings.sock
tmux -f /dev/null -S $sock new-session -d -s s -x 100 -y 30 "python3 settings.py; sleep 5"
screen_has() {  # wait until the pane shows $1 (up to 30 s)
  for _ in $(seq 300); do
    tmux -S $sock capture-pane -p -t s | grep -q -- "$1" && return 0
    sleep 0.1
  done
  echo "never saw: $1" >&2; tmux -S $sock capture-pane -p -t s >&2; return 1
}
keys() { tmux -S $sock send-keys -t s "$@"; }
screen_has 'SETTINGS'
keys Right                                       # Theme: dark -> solarized
keys Down Right Right Right                      # Font size: 12 -> 15
keys Down Space                                  # Autosave: on (enables the next row)
keys Down Right Right Right Right Right Right Right  # Autosave every: 5 -> 12
screen_has 'Autosave every (min)  12$'
keys Down Down Enter                             # Username (Language stays as it is)
screen_has 'New username:'
keys ops-team Enter                              # the prompt starts empty
screen_has 'Username              ops-team'
keys Down Enter                                  # Save
for _ in $(seq 300); do grep -q '"signature": "[0-9a-f]\{64\}"' config.json && break; sleep 0.1; done
tmux -S $sock kill-server 2>/dev/null
cat config.json
grep -q '"username": "ops-team"' config.json
