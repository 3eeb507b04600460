import pwd
import subprocess
from pathlib import Path


def test_postinst_ran():
    assert Path("/etc/ledger/ledger.ini").is_file()
    assert pwd.getpwnam("ledgerd").pw_dir == "/var/lib/ledger"


def test_balances():
    accts = Path("/app/accounts.txt").read_text().split()
    want = [
        f"{a} {subprocess.run(['/usr/bin/ledger-balance', a], capture_output=True, text=True, check=True).stdout.strip()}"
        for a in accts
    ]
    assert all(w.endswith("EUR") for w in want)
    assert Path("/app/balances.txt").read_text().splitlines() == want


def test_owner():
    assert Path("/app/owner.txt").read_text().strip() == "ledgerd"
