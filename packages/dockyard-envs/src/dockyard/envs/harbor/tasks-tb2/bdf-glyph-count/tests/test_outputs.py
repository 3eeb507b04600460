from pathlib import Path


def test_glyph_counts():
    rows = Path("/app/glyphs.csv").read_text().split()
    assert rows[0] == "font,glyphs"
    want = [
        f"{p.name},{p.read_text().count(chr(10) + 'STARTCHAR ')}"
        for p in sorted(Path("/fonts").glob("*.bdf"))
    ]
    assert len(want) == 4
    assert rows[1:] == want
