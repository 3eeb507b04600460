import csv
import json
from pathlib import Path


def expected():
    tot = {}
    with open("/app/sales.csv") as f:
        for row in csv.DictReader(f):
            tot[row["region"]] = tot.get(row["region"], 0.0) + float(row["amount"])
    return {k: round(v, 2) for k, v in tot.items()}


def test_totals_file_exists():
    assert Path("/app/totals.json").is_file()


def test_totals_match():
    got = json.loads(Path("/app/totals.json").read_text())
    want = expected()
    assert set(got) == set(want)
    for k, v in want.items():
        assert abs(float(got[k]) - v) < 0.005, k


def test_regions_sorted():
    got = json.loads(Path("/app/totals.json").read_text())
    assert list(got) == sorted(got)
