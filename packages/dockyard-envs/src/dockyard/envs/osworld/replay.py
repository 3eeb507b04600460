"""The animated GIF of a recorded episode (record.py), the replay a person watches.

:func:`write_gif` draws each step's actions on its frame (a ring at a click, a line for a drag,
the typed text or keys in a caption) and writes an animated GIF (Pillow).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

try:
    from PIL import Image, ImageDraw
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        'the OSWorld replay needs Pillow: pip install "dockyard-envs[osworld]"'
    ) from e


def _caption(step: dict[str, Any]) -> str:
    if step.get("ended") == "end":
        return "(the end)"
    if step.get("invalid"):
        return f"INVALID: {step['invalid']}"[:90]
    parts = []
    for a in step.get("actions") or []:
        t, p = a["action_type"], a.get("parameters", {})
        if t == "TYPING":
            parts.append(f"type {p['text']!r}")
        elif t in ("PRESS", "HOTKEY"):
            parts.append("key " + "+".join(p.get("keys") or [p.get("key", "")]))
        elif "x" in p:
            parts.append(f"{t.lower()} ({p['x']}, {p['y']})")
        else:
            parts.append(t.lower())
    return "; ".join(parts)[:90] or "(no action)"


def _draw(im: Image.Image, step: dict[str, Any], scale: tuple[float, float], i: int) -> None:
    d = ImageDraw.Draw(im)
    prev = None
    for a in step.get("actions") or []:
        p = a.get("parameters", {})
        if "x" not in p:
            continue
        x, y = p["x"] * scale[0], p["y"] * scale[1]
        if a["action_type"] == "DRAG_TO" and prev is not None:
            d.line([prev, (x, y)], fill=(255, 40, 40), width=3)
        r = 9
        d.ellipse([x - r, y - r, x + r, y + r], outline=(255, 40, 40), width=3)
        prev = (x, y)
    h = 14
    d.rectangle([0, im.height - h, im.width, im.height], fill=(0, 0, 0))
    d.text((3, im.height - h + 1), f"{i}: {_caption(step)}", fill=(255, 255, 0))


def write_gif(episode: str | Path, out: str | Path | None = None, ms: int = 900) -> Path:
    """An animated GIF of a recorded episode, each step's actions drawn on the frame it saw."""
    ep = Path(episode)
    meta = json.loads((ep / "episode.json").read_text())
    screen = meta.get("screen") or None
    frames = []
    for i, step in enumerate(meta["steps"]):
        if not step.get("frame"):
            continue
        with Image.open(ep / step["frame"]) as raw:
            im = raw.convert("RGB")
        sx = im.width / screen[0] if screen else 1.0
        sy = im.height / screen[1] if screen else 1.0
        _draw(im, step, (sx, sy), i)
        frames.append(im)
    if not frames:
        raise ValueError(f"{ep}: the episode has no frames (screenshots were off)")
    out = Path(out) if out is not None else ep / "replay.gif"
    frames[0].save(out, save_all=True, append_images=frames[1:], duration=ms, loop=0)
    return out
