#!/bin/bash
set -euo pipefail
cat $(ls /home/builder/notes/*.md | sort) > /app/all_notes.md
stat -c %U /home/builder/notes > /app/notes_owner.txt
