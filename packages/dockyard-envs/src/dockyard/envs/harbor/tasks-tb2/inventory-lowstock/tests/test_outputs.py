import subprocess
from pathlib import Path


def run(*args):
    return subprocess.run(
        ["/opt/stock/bin/stockctl", *args],
        capture_output=True,
        text=True,
        check=True,
        env={"STOCK_DB": "/opt/stock/inventory.tsv", "PATH": "/usr/bin:/bin"},
    ).stdout


def test_lowstock():
    t = int(run("threshold"))
    want = sorted(s for s, q in (line.split() for line in run("list").splitlines()) if int(q) < t)
    assert want
    assert Path("/app/lowstock.txt").read_text().split() == want
