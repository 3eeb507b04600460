"""Read deliverables (CSV, XLSX, DOCX, PDF, PNG, Markdown) into plain summaries — in a separate,
resource-limited process, never in the environment's own.

The files were written by the policy: anything may be in them. So each file is parsed by
``python -m dockyard.envs.gdpval.parse`` in a child process with an address-space and CPU limit
and a wall-clock timeout (:func:`parse_file`), after these checks in that child:

* the file is at most ``max_file_bytes`` (checked before the child starts too);
* XLSX / DOCX (zip containers): at most ``max_members`` members, at most ``max_unzipped_bytes``
  uncompressed in all, no member compressed more than ``max_ratio`` : 1 (a zip bomb is refused
  from its central directory, before anything is inflated); openpyxl parses with defusedxml
  (entity expansion refused), python-docx with entities not resolved;
* sheets are read row by row (``read_only``), at most ``max_rows`` × ``max_cols`` cells each;
  formulas are read as their cached values (openpyxl writes none: the task asks for values);
* PDF: at most ``max_pages`` pages of text; PNG: at most ``max_pixels`` pixels, ``verify()``ed.

A file that breaks any of it — or kills the child (memory, time) — is *malformed*: its
criteria fail. That is the deliverable's verdict, never an ``infra_error``.

Summary (JSON): ``{"kind", "tables": {name: [[cell, ...], ...]}, "text": str, "headings":
[str], "pages": int | None, "image": {"width", "height", "mode"} | None}``; XLSX tables are its
sheets, CSV's one table is ``"csv"``, DOCX's tables are ``"table1"``, ``"table2"``...
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import resource
import sys
import zipfile
from dataclasses import asdict, dataclass
from typing import Any

KINDS = {".csv": "csv", ".xlsx": "xlsx", ".docx": "docx", ".pdf": "pdf", ".png": "png",
         ".md": "md", ".txt": "md"}  # fmt: skip


@dataclass(frozen=True)
class ParseLimits:
    """Caps on what one deliverable may cost to read."""

    max_file_bytes: int = 5 << 20
    max_members: int = 2000
    max_unzipped_bytes: int = 64 << 20
    max_ratio: float = 200.0
    max_rows: int = 5000
    max_cols: int = 100
    max_sheets: int = 20
    max_pages: int = 50
    max_pixels: int = 40_000_000
    max_text_chars: int = 200_000
    memory_mb: int = 1024
    timeout_s: float = 30.0


class Malformed(ValueError):
    """A deliverable that does not parse within the limits."""


def kind_of(path: str) -> str:
    """The deliverable kind from the file name's suffix (ValueError for another)."""
    for suffix, kind in KINDS.items():
        if path.lower().endswith(suffix):
            return kind
    raise ValueError(f"{path!r}: deliverables are {', '.join(KINDS)} files")


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)  # dates, times, decimals: their text


def _check_zip(data: bytes, lim: ParseLimits) -> None:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise Malformed(f"not a zip container: {e}") from e
    infos = zf.infolist()
    if len(infos) > lim.max_members:
        raise Malformed(f"{len(infos)} zip members (at most {lim.max_members})")
    total = sum(i.file_size for i in infos)
    if total > lim.max_unzipped_bytes:
        raise Malformed(f"{total} bytes uncompressed (at most {lim.max_unzipped_bytes})")
    for i in infos:
        if i.file_size > lim.max_ratio * max(i.compress_size, 1) and i.file_size > 1 << 20:
            raise Malformed(f"zip member {i.filename!r} inflates {i.file_size}:{i.compress_size}")


def _rows(rows: Any, lim: ParseLimits) -> list[list[Any]]:
    out = []
    for n, row in enumerate(rows):
        if n >= lim.max_rows:
            raise Malformed(f"more than {lim.max_rows} rows")
        out.append([_cell(v) for v in list(row)[: lim.max_cols]])
    while out and all(v in (None, "") for v in out[-1]):
        out.pop()
    return out


def _csv(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8 text: {e}") from e
    rows = _rows(csv.reader(io.StringIO(text)), lim)
    return {"tables": {"csv": rows}, "text": text[: lim.max_text_chars]}


def _xlsx(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    _check_zip(data, lim)
    # lazy: openpyxl is in the gdpval extra, not a dependency of dockyard-envs
    import openpyxl

    wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    if len(wb.sheetnames) > lim.max_sheets:
        raise Malformed(f"{len(wb.sheetnames)} sheets (at most {lim.max_sheets})")
    tables = {
        name: _rows(wb[name].iter_rows(values_only=True, max_col=lim.max_cols), lim)
        for name in wb.sheetnames
    }
    wb.close()
    text = "\n".join(
        f"[{n}]\n" + "\n".join("\t".join("" if v is None else str(v) for v in r) for r in rows)
        for n, rows in tables.items()
    )
    return {"tables": tables, "text": text[: lim.max_text_chars]}


def _docx(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    _check_zip(data, lim)
    # lazy: python-docx is in the gdpval extra, not a dependency of dockyard-envs
    import docx

    doc = docx.Document(io.BytesIO(data))
    headings, lines = [], []
    for p in doc.paragraphs:
        style = (p.style.name if p.style is not None else "") or ""
        if style.startswith(("Heading", "Title")) and p.text.strip():
            headings.append(p.text.strip())
        lines.append(p.text)
    tables = {}
    for i, t in enumerate(doc.tables[: lim.max_sheets], 1):
        tables[f"table{i}"] = _rows(([c.text for c in r.cells] for r in t.rows), lim)
        lines += ["\t".join(map(str, r)) for r in tables[f"table{i}"]]
    text = "\n".join(lines)
    return {"tables": tables, "text": text[: lim.max_text_chars], "headings": headings}


def _pdf(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    # lazy: pypdf is in the gdpval extra, not a dependency of dockyard-envs
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = len(reader.pages)
    except Exception as e:  # pypdf raises many kinds on a broken file
        raise Malformed(f"not a readable PDF: {type(e).__name__}: {e}") from e
    if pages > lim.max_pages:
        raise Malformed(f"{pages} pages (at most {lim.max_pages})")
    text = "\n".join((p.extract_text() or "") for p in reader.pages)
    return {"text": text[: lim.max_text_chars], "pages": pages}


def _png(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    # lazy: pillow is in the gdpval extra, not a dependency of dockyard-envs
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = lim.max_pixels  # larger: DecompressionBombError (an error here)
    with Image.open(io.BytesIO(data)) as im:
        if im.format != "PNG":
            raise Malformed(f"a {im.format} image, not a PNG")
        im.verify()
        return {"image": {"width": im.width, "height": im.height, "mode": im.mode}}


def _md(data: bytes, lim: ParseLimits) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8 text: {e}") from e
    headings = [ln.lstrip("#").strip() for ln in text.splitlines() if ln.startswith("#")]
    return {"text": text[: lim.max_text_chars], "headings": headings}


READERS = {"csv": _csv, "xlsx": _xlsx, "docx": _docx, "pdf": _pdf, "png": _png, "md": _md}


def summarise(kind: str, data: bytes, lim: ParseLimits) -> dict[str, Any]:
    """The summary of one deliverable (in *this* process: :func:`parse_file` is the safe
    entry); Malformed when it does not parse."""
    if len(data) > lim.max_file_bytes:
        raise Malformed(f"{len(data)} bytes (at most {lim.max_file_bytes})")
    if not data:
        raise Malformed("empty file")
    try:
        out = READERS[kind](data, lim)
    except Malformed:
        raise
    except Exception as e:  # any library error on hostile bytes is the file's fault
        raise Malformed(f"{type(e).__name__}: {str(e)[:300]}") from e
    base = {"kind": kind, "tables": {}, "text": "", "headings": [], "pages": None, "image": None}
    return {**base, **out}


def _limit_child(memory_mb: int, cpu_s: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))


async def parse_file(path: str, data: bytes, lim: ParseLimits | None = None) -> dict[str, Any]:
    """``{"ok": True, "summary": ...}`` or ``{"ok": False, "error": why}`` for deliverable
    ``path`` with contents ``data``, read in a limited child process (see the module
    docstring)."""
    lim = lim or ParseLimits()
    kind = kind_of(path)
    if len(data) > lim.max_file_bytes:
        return {"ok": False, "error": f"{len(data)} bytes (at most {lim.max_file_bytes})"}
    request = json.dumps({"kind": kind, "data": base64.b64encode(data).decode(),
                          "limits": asdict(lim)}).encode()  # fmt: skip
    cpu = max(1, int(lim.timeout_s))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-m", "dockyard.envs.gdpval.parse",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: _limit_child(lim.memory_mb, cpu),
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(request), lim.timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"ok": False, "error": f"reading it took over {lim.timeout_s:.0f} s"}
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return {"ok": False, "error": f"the reader died (exit {proc.returncode}): {tail[0][:300]}"}
    return json.loads(out)


def _main() -> None:
    req = json.loads(sys.stdin.buffer.read())
    lim = ParseLimits(**req["limits"])
    try:
        summary = summarise(req["kind"], base64.b64decode(req["data"]), lim)
        reply: dict[str, Any] = {"ok": True, "summary": summary}
    except Malformed as e:
        reply = {"ok": False, "error": str(e)}
    except MemoryError:
        reply = {"ok": False, "error": "reading it needed more memory than allowed"}
    sys.stdout.write(json.dumps(reply))


if __name__ == "__main__":
    _main()
