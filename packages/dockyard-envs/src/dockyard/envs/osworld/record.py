"""An episode saved for replay: its frames and actions (replay.py animates them).

:class:`Recorder` writes one folder per episode: ``frames/NNN.png`` (the screenshot each step
saw) and ``episode.json`` (task, instruction, screen size, per step: the agent's response, the
actions executed in OSWorld's dict form, why a step was refused, the frame's file; the score).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from dockyard.sandbox.desktop.wire import DesktopObservation

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Recorder:
    """Collects an episode's frames and actions; ``save()`` writes them under ``root``."""

    def __init__(self, root: str | Path, task: dict[str, Any]) -> None:
        self.dir = Path(root) / _SAFE.sub("_", str(task.get("id", "episode")))
        n = 0
        while self.dir.exists():
            n += 1
            self.dir = self.dir.with_name(f"{self.dir.name.split('~')[0]}~{n}")
        (self.dir / "frames").mkdir(parents=True)
        self.meta: dict[str, Any] = {
            "task_id": task.get("id"),
            "instruction": task.get("instruction"),
            "steps": [],
        }

    def frame(self, obs: DesktopObservation) -> str | None:
        if not obs.png_b64:
            return None
        name = f"frames/{len(list((self.dir / 'frames').iterdir())):03d}.png"
        (self.dir / name).write_bytes(base64.b64decode(obs.png_b64))
        return name

    def step(self, response: str, before: str | None, obs: DesktopObservation) -> None:
        """One step: the frame the agent saw (``before``), what it answered, what ran."""
        self.meta["steps"].append({
            "frame": before, "response": response, "actions": obs.actions,
            "invalid": obs.invalid, "errors": obs.errors, "ended": obs.ended,
        })  # fmt: skip

    def final(self, obs: DesktopObservation) -> None:
        """The screen the episode ended on (the replay's last frame)."""
        self.meta["steps"].append({"frame": self.frame(obs), "response": None, "actions": [],
                                   "invalid": None, "errors": [], "ended": "end"})  # fmt: skip

    def save(self, score: float | None, **extra: Any) -> Path:
        self.meta |= {"score": score, **extra}
        (self.dir / "episode.json").write_text(json.dumps(self.meta, indent=1))
        return self.dir
