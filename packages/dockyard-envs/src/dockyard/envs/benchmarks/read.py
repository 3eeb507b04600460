"""Read a benchmark's local copy into plain records (dicts), whatever form it was saved in.

=========================================  ==============================================
a ``save_to_disk`` folder                  ``datasets.load_from_disk`` (``dataset_info.json``
                                           / ``state.json``, or ``dataset_dict.json``: one
                                           split, chosen by ``split``)
``*.parquet`` (a file, or a folder of       pyarrow; in a folder (the Hub's ``data/`` layout)
them)                                      the files whose name holds ``split`` if any do
``*.jsonl`` / ``*.json``                   one object per line, or one JSON array
``*.csv``                                  the header row names the fields (GPQA ships CSV)
=========================================  ==============================================

Nothing is downloaded. ``datasets`` and ``pyarrow`` are imported only for those layouts; without
them the error says what to install.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


class LayoutError(ValueError):
    """A benchmark file that is missing, or not in a layout (or with the fields) expected."""


SPLITS = ("test", "validation", "train")  # the split taken when a folder holds several


def read_rows(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """The records of ``path`` (see the module docstring)."""
    p = Path(path)
    if not p.exists():
        raise LayoutError(f"{p}: no such file or folder (eval.path)")
    if p.is_dir():
        if any((p / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return _from_disk(p, split)
        files = sorted(x for x in p.rglob("*") if x.suffix in (".parquet", ".jsonl", ".json"))
        files = [x for x in files if x.name not in ("dataset_info.json", "state.json")]
        if split is not None and any(split in x.name for x in files):
            files = [x for x in files if split in x.name]
        if not files:
            raise LayoutError(
                f"{p}: a folder with neither a save_to_disk dataset (dataset_info.json) nor "
                "Parquet / JSONL files"
            )
        return [r for f in files for r in _file(f)]
    return _file(p)


def _file(p: Path) -> list[dict[str, Any]]:
    if p.suffix == ".parquet":
        try:
            # lazy: pyarrow is not a dependency of dockyard-envs; only Parquet copies need it
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError(f"{p}: reading Parquet needs pyarrow: pip install pyarrow") from e
        return list(pq.read_table(p).to_pylist())
    if p.suffix == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            return [dict(r) for r in csv.DictReader(f)]
    if p.suffix in (".jsonl", ".json"):
        return _json(p)
    raise LayoutError(f"{p}: unknown file type {p.suffix!r} (.parquet, .jsonl, .json or .csv)")


def _json(p: Path) -> list[dict[str, Any]]:
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise LayoutError(f"{p}:{n}: not a JSON object: {e}") from e
    bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)), None)
    if bad is not None:
        raise LayoutError(f"{p}: record {bad} is not a JSON object")
    return rows


def _from_disk(p: Path, split: str | None) -> list[dict[str, Any]]:
    try:
        # lazy: datasets is not a dependency of dockyard-envs (0.8 s); only save_to_disk needs it
        import datasets
    except ImportError as e:
        raise ImportError(
            f"{p} is a save_to_disk folder: reading it needs pip install datasets"
        ) from e
    ds = datasets.load_from_disk(str(p))
    if isinstance(ds, datasets.DatasetDict):
        names = [str(n) for n in ds]
        pick = split or next(
            (s for s in SPLITS if s in names), names[0] if len(names) == 1 else None
        )
        if pick not in names:
            raise LayoutError(
                f"{p}: splits {', '.join(names)}; set eval.split to one of them"
                + (f" (not {split!r})" if split else "")
            )
        ds = ds[pick]
    return [dict(r) for r in ds]  # type: ignore[union-attr]
