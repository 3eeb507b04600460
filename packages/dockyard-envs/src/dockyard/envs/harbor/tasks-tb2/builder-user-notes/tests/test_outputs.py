from pathlib import Path


def test_signature_written_as_builder():
    assert Path("/home/builder/notes/99-signature.md").read_text().strip() == "# written by builder"


def test_concatenation():
    notes = sorted(Path("/home/builder/notes").glob("*.md"))
    assert len(notes) == 6
    assert Path("/app/all_notes.md").read_text() == "".join(p.read_text() for p in notes)


def test_owner():
    assert Path("/app/notes_owner.txt").read_text().strip() == "builder"
