#!/bin/bash
cat > /app/backup.sh <<'SH'
#!/bin/bash
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: backup.sh SRC OUTDIR" >&2; exit 2; }
src=$(cd -- "$1" && pwd)
name=$(basename -- "$src")
mkdir -p -- "$2"
out=$(cd -- "$2" && pwd)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
cd -- "$(dirname -- "$src")"
find "$name" -type d \( -name node_modules -o -name .cache -o -name .git \) -prune \
  -o -type f ! -name '*.log' ! -name '*.pyc' ! -name .env -print0 | LC_ALL=C sort -z > "$list"
tar --null --no-recursion -T "$list" --format=gnu --owner=0 --group=0 --numeric-owner \
  --mtime=@1704067200 -cf - | gzip -n -9 > "$out/backup.tar.gz"
xargs -0 -r sha256sum -- < "$list" > "$out/MANIFEST.sha256"
SH
chmod +x /app/backup.sh
/app/backup.sh /app/project /app/backup
