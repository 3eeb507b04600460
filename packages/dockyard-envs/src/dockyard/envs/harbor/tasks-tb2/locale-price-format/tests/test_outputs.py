from pathlib import Path


def de(x: float) -> str:
    s = f"{x:,.2f}"  # 1,234.50
    return s.replace(",", "_").replace(".", ",").replace("_", ".")


def test_locale_was_generated():
    assert any(p.name.startswith("locale-archive") for p in Path("/usr/lib/locale").iterdir())


def test_prices():
    want = [de(float(x)) for x in Path("/app/prices.txt").read_text().split()]
    assert "." in "".join(want)  # some value has a thousands separator
    assert Path("/app/prices_de.txt").read_text().split() == want
