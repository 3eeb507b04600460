"""`dockyard export CKPT OUT [--force]`: a checkpoint's policy as a Hugging Face folder.

``CKPT`` is a ``checkpoint_dir`` (its newest complete ``step_<n>/``), a ``step_<n>/`` folder or
its ``policy/``; ``OUT`` is written atomically and loads with
``AutoModelForCausalLM.from_pretrained(OUT)`` (see :mod:`dockyard.train.export`). A checkpoint
that cannot be exported, or a non-empty ``OUT`` without ``--force``, exits 2 with one line.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.export import ExportError, export_hf, resolve_checkpoint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        metavar="CKPT",
        help="checkpoint_dir (newest complete step), a step_<n>/ folder, or its policy/",
    )
    parser.add_argument("out", metavar="OUT", help="folder to write the Hugging Face model to")
    parser.add_argument("--force", action="store_true", help="replace OUT if it is not empty")


def run(args: argparse.Namespace) -> int:
    try:
        policy, backend = resolve_checkpoint(args.checkpoint)
        print(f"dockyard export: {policy} ({backend}) -> {args.out}", flush=True)
        out = export_hf(policy, args.out, force=args.force)
    except (ExportError, FileNotFoundError, ImportError) as e:
        print(f"dockyard export: {e}", file=sys.stderr)
        return 2
    print(f"dockyard export: wrote {out}")
    return 0
