#!/bin/bash
cd /app
tr 'A-Z' 'a-z' < book.txt | grep -oE '[a-z]+' | sort | uniq -c | sort -k1,1nr -k2,2 | head -5 \
  | awk '{print $1, $2}' > top.txt
