"""A small encrypted vault.

    python3 vault.py list           the entry names
    python3 vault.py unlock NAME    asks for the passphrase (typed at a terminal), then writes
                                    the entry's secret to unlocked/NAME.txt after a confirmation

Entries are encrypted with a key derived from the passphrase (PBKDF2-HMAC-SHA256) and
authenticated with an HMAC; a wrong passphrase unlocks nothing.
"""

import getpass
import hashlib
import hmac
import json
import os
import sys
import time

VAULT = "vault.json"


def _key(passphrase: str, salt: bytes, rounds: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", passphrase.encode(), salt, rounds)


def _stream(key: bytes, n: int) -> bytes:
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(key + i.to_bytes(4, "big")).digest()
        i += 1
    return out[:n]


def _open(entry: dict, passphrase: str, rounds: int) -> str | None:
    salt, ct = bytes.fromhex(entry["salt"]), bytes.fromhex(entry["ct"])
    key = _key(passphrase, salt, rounds)
    mac = hmac.new(key, salt + ct, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, entry["mac"]):
        return None
    return bytes(a ^ b for a, b in zip(ct, _stream(key, len(ct)), strict=True)).decode()


def main(argv: list[str]) -> int:
    with open(VAULT) as f:
        vault = json.load(f)
    if argv[:1] == ["list"]:
        print("\n".join(sorted(vault["entries"])))
        return 0
    if len(argv) != 2 or argv[0] != "unlock":
        print("usage: python3 vault.py list | unlock NAME", file=sys.stderr)
        return 2
    name = argv[1]
    if name not in vault["entries"]:
        print(f"vault: no entry named {name!r}", file=sys.stderr)
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "vault: the passphrase must be typed at a terminal (stdin is not a TTY)",
            file=sys.stderr,
        )
        return 3
    passphrase = getpass.getpass("Passphrase: ")
    secret = _open(vault["entries"][name], passphrase, vault["rounds"])
    if secret is None:
        time.sleep(1.0)
        print("vault: wrong passphrase", file=sys.stderr)
        return 1
    answer = input(f"Write {name} to unlocked/{name}.txt? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        print("vault: nothing written")
        return 0
    os.makedirs("unlocked", exist_ok=True)
    with open(os.path.join("unlocked", f"{name}.txt"), "w") as f:
        f.write(secret + "\n")
    print(f"vault: {name} unlocked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
