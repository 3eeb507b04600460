import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BASE = "http://127.0.0.1:8080"


def get(path):
    # a server on the container's own loopback: never through a proxy
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(BASE + path, timeout=5) as r:
        return r.status, r.read().decode()


def test_health():
    assert get("/health") == (200, "ok")


@pytest.mark.parametrize("name", ["apple", "pear", "plum", "quince"])
def test_items_are_the_files_counts(name):
    counts = json.loads(Path("/app/inventory.json").read_text())
    assert get(f"/items/{name}") == (200, str(counts[name]))


def test_unknown_item_is_404():
    with pytest.raises(urllib.error.HTTPError) as e:
        get("/items/durian")
    assert e.value.code == 404
