"""Build vault.json (run once at provisioning, then deleted): fresh random salts each build."""

import hashlib
import hmac
import json
import os

PASSPHRASE = "amber-otter-1987"
ROUNDS = 200_000
SECRETS = {
    "db": "V9i1A9JvKcXc1J7_xjibvAeQ",
    "api": "hzAuOCtcN8pNLGjSLvLQElq-",
    "smtp": "OPSdlgMrKxgkRQS0-U-GWfaR",
    "legacy": "ysM7df_kG2qXtRY3bnJJHE3G",
}


def seal(secret: str) -> dict:
    salt = os.urandom(16)
    key = hashlib.pbkdf2_hmac("sha256", PASSPHRASE.encode(), salt, ROUNDS)
    pt = secret.encode()
    stream = b""
    i = 0
    while len(stream) < len(pt):
        stream += hashlib.sha256(key + i.to_bytes(4, "big")).digest()
        i += 1
    ct = bytes(a ^ b for a, b in zip(pt, stream[: len(pt)], strict=True))
    mac = hmac.new(key, salt + ct, hashlib.sha256).hexdigest()
    return {"salt": salt.hex(), "ct": ct.hex(), "mac": mac}


with open("vault.json", "w") as f:
    json.dump({"rounds": ROUNDS, "entries": {k: seal(v) for k, v in SECRETS.items()}}, f, indent=1)
