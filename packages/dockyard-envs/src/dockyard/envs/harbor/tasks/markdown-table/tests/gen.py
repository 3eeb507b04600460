"""Generate /app/data/inventory.csv (deterministic): quoted fields with commas, doubled quotes,
embedded newlines and pipes, accented text, short rows, numeric columns with blanks and
negatives, and columns that look numeric but are not."""

import csv
import io
import random
import re

ITEMS = [
    "Crème fraîche",
    "Jalapeño | hot",
    'Bolt 3/8"',
    "Widget, large",
    "Señal cable",
    "Smørbrød tray",
    "Plain box",
    "Gear\nspare part",
    "Übergröße crate",
    "Tape",
    "Naïve mug",
    "Glue (2-pack)",
    "Fan\r\nbrushless",
]
NUMBER = re.compile(r"-?\d+(\.\d+)?")


def build() -> dict[str, bytes]:
    rng = random.Random(3141)
    rows = [["SKU", "Item", "Qty", "Unit price", "Delta", "Bin", "Notes"]]
    for i in range(42):
        qty = str(rng.randint(0, 12000)) if rng.random() > 0.1 else ""
        price = f"{rng.randint(1, 99999) / 100:.2f}"
        delta = str(rng.randint(-500, 500))
        bin_ = rng.choice(["A1", "B12", "007", "C3", "12"])  # mixed: not a numeric column
        notes = rng.choice(["", "", "fragile", "reorder soon!", 'say "hi"', "  padded  ", "3"])
        row = [f"SKU-{i:04d}", rng.choice(ITEMS), qty, price, delta, bin_, notes]
        if rng.random() < 0.08:
            row = row[: rng.randint(3, 6)]  # a short row: missing trailing cells
        rows.append(row)
    rows[17][4] = "-0.5"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return {"data/inventory.csv": buf.getvalue().encode()}


def render(data: bytes) -> str:
    """The expected Markdown table."""
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    head, body = rows[0], rows[1:]
    n = len(head)

    def cell(s: str) -> str:
        return re.sub(r"\r\n|\n|\r", "<br>", s.strip()).replace("|", "\\|")

    table = [[cell(c) for c in (r + [""] * n)[:n]] for r in [head, *body]]
    right = [
        all(NUMBER.fullmatch(r[j]) for r in table[1:] if r[j]) and any(r[j] for r in table[1:])
        for j in range(n)
    ]
    width = [max(3, *(len(r[j]) for r in table)) for j in range(n)]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if rt else c.ljust(w)
                for c, w, rt in zip(cells, width, right, strict=False)
            )
            + " |"
        )

    sep = (
        "| "
        + " | ".join(
            "-" * (w - 1) + ":" if rt else "-" * w for w, rt in zip(width, right, strict=False)
        )
        + " |"
    )
    return "\n".join([line(table[0]), sep] + [line(r) for r in table[1:]]) + "\n"


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
