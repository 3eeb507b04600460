#!/bin/bash
cd /app
fix=$(git log --format=%H --grep='fix page count' release-1.x)
git cherry-pick -x "$fix" >/dev/null 2>&1
# main moved pager.py to shop/pager.py and changed the lines around the fix: apply it there
git rm -q pager.py
sed -i 's|^    return total // size + 1$|    return -(-total // size)  # ceiling: 10 items at 5 per page are 2 pages|' shop/pager.py
git add shop/pager.py test_pager.py
GIT_EDITOR=true git cherry-pick --continue >/dev/null
git log -1 --format=%B
