"""`dockyard osworld replay EPISODE [--out X.gif]` / `check DIR` / `warmstart --config F`.

``replay`` animates an episode the OSWorld environment recorded (``env.osworld.options.
replay_dir``): each step's frame with its actions drawn on it, as a GIF. ``check`` loads an
OSWorld task folder (``evaluation_examples`` layout) and prints what runs here and what is
refused, with each reason; exit 0 iff at least one task runs. ``warmstart`` writes the model a
GRPO config starts from: SFT on oracle demonstrations (:mod:`.osworld_warmstart`).
"""

from __future__ import annotations

import argparse
import sys

from dockyard.envs.osworld.tasks import load_tasks
from dockyard.envs.osworld.toy import DATA
from dockyard.train.cli import osworld_warmstart


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = sub.add_parser("replay", help="write a recorded episode as an animated GIF")
    r.add_argument("episode", metavar="EPISODE", help="an episode folder (holds episode.json)")
    r.add_argument("--out", default=None, help="the GIF (default: EPISODE/replay.gif)")
    r.add_argument("--ms", type=int, default=900, help="milliseconds per frame (default 900)")
    c = sub.add_parser("check", help="load a task folder: what runs here, what is refused")
    c.add_argument("dir", metavar="DIR", nargs="?", default=None, help="default: shipped tasks")
    w = sub.add_parser(
        "warmstart", help="build a tiny vision-language model and SFT it on oracle "
        "demonstrations: the model a GRPO config's policy.model_name names",
    )  # fmt: skip
    osworld_warmstart.add_arguments(w)


def run(args: argparse.Namespace) -> int:
    if args.action == "warmstart":
        return osworld_warmstart.run(args)
    if args.action == "replay":
        # lazy: it needs Pillow, which is optional (dockyard-envs[osworld]); check does not
        from dockyard.envs.osworld.replay import write_gif

        try:
            out = write_gif(args.episode, args.out, ms=args.ms)
        except (OSError, ValueError, KeyError) as e:
            print(f"dockyard osworld replay: {e}", file=sys.stderr)
            return 2
        print(f"dockyard osworld replay: wrote {out}")
        return 0
    try:
        tasks, refused = load_tasks(args.dir or DATA)
    except FileNotFoundError as e:
        print(f"dockyard osworld check: {e}", file=sys.stderr)
        return 2
    for t in tasks:
        print(f"ok       {t.domain}/{t.id}")
    for r in refused:
        print(f"refused  {r.task_id}: {r.reason}")
    print(f"{len(tasks)} runnable, {len(refused)} refused")
    return 0 if tasks else 1
