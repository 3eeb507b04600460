"""Score /app/config.json: signed by settings.py's scheme, the four requested settings (0.25
each), the untouched one unchanged (else 0). Targets and the original values are held out here."""

import hashlib
import hmac
import json
import sys

TARGET = {
    "theme": "solarized",
    "font_size": 15,
    "autosave": True,
    "autosave_minutes": 12,
    "username": "ops-team",
}
UNCHANGED = {"language": "de"}
KEYS = {"autosave", "autosave_minutes", "font_size", "language", "signature", "theme", "username"}


def main() -> float:
    try:
        with open("config.json") as f:
            cfg = json.load(f)
        with open(".settings-key") as f:
            key = f.read().strip().encode()
    except (OSError, ValueError) as e:
        print(f"unreadable: {e}", file=sys.stderr)
        return 0.0
    if set(cfg) != KEYS:
        print(f"keys {sorted(cfg)} != {sorted(KEYS)}", file=sys.stderr)
        return 0.0
    body = json.dumps({k: v for k, v in cfg.items() if k != "signature"}, sort_keys=True)
    if not hmac.compare_digest(
        hmac.new(key, body.encode(), hashlib.sha256).hexdigest(), str(cfg["signature"])
    ):
        print("bad signature: config.json was not saved by settings.py", file=sys.stderr)
        return 0.0
    if any(cfg[k] != v for k, v in UNCHANGED.items()):
        print("an untouched setting changed", file=sys.stderr)
        return 0.0
    parts = [
        cfg["theme"] == TARGET["theme"],
        cfg["font_size"] == TARGET["font_size"],
        cfg["autosave"] is True and cfg["autosave_minutes"] == TARGET["autosave_minutes"],
        cfg["username"] == TARGET["username"],
    ]
    print(f"parts: {parts}", file=sys.stderr)
    return sum(parts) / len(parts)


print(main())
