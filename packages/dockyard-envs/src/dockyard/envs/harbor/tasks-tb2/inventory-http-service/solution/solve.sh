#!/bin/bash
set -euo pipefail
cat > /app/server.py <<'PY'
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, "ok")
        if self.path.startswith("/items/"):
            counts = json.load(open("/app/inventory.json"))
            name = self.path[len("/items/"):]
            if name in counts:
                return self.reply(200, str(counts[name]))
        self.reply(404, "not found")

    def reply(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", 8080), Handler).serve_forever()
PY
nohup python3 /app/server.py > /tmp/server.log 2>&1 &
for _ in $(seq 50); do
    python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8080/health", timeout=1)' 2>/dev/null && exit 0
    sleep 0.2
done
echo "the server did not start" >&2
exit 1
