#!/bin/bash
# Drive the prompts through a pseudo-terminal of our own, waiting for each prompt like `expect`.
cd /app
python3 - <<'PY'
import os
import pty
import sys
import time


def run(name: str) -> None:
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("python3", ["python3", "vault.py", "unlock", name])
    seen = b""

    def expect(text: bytes, timeout: float = 30.0) -> None:
        nonlocal seen
        end = time.time() + timeout
        while text not in seen:
            if time.time() > end:
                sys.exit(f"timed out waiting for {text!r}; screen: {seen!r}")
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                sys.exit(f"program ended before {text!r}; screen: {seen!r}")
            seen += chunk

    expect(b"Passphrase: ")
    os.write(fd, b"amber-otter-1987\r")
    expect(b"[y/N] ")
    os.write(fd, b"y\r")
    expect(b"unlocked")
    os.waitpid(pid, 0)


for entry in ("db", "api"):
    run(entry)
PY
ls unlocked
