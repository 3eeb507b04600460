"""The `dockyard` command line.

Sub-commands live in a small registry (``COMMANDS``): each entry names the module that implements
it, imported only when that sub-command runs, so `dockyard --help` starts without importing torch,
Ray or vLLM. A sub-command is a module with ``add_arguments(parser)`` and ``run(args) -> int``;
another package adds one under the entry-point group ``dockyard.commands`` (name = the
sub-command, value = its module; a built-in name is not replaced)::

    [project.entry-points."dockyard.commands"]
    my-driver = "my_package.cli"
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
from importlib import metadata

COMMAND_GROUP = "dockyard.commands"

# name -> (module implementing it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "config": (
        "dockyard.train.cli.config",
        "Validate a config (`dockyard config check FILE [overrides]`).",
    ),
    "train": ("dockyard.train.cli.train", "Run GRPO training from a config."),
    "sft": ("dockyard.train.cli.sft", "Run supervised fine-tuning from a config."),
    "dpo": (
        "dockyard.train.cli.dpo",
        "Run DPO (or cDPO, IPO, DPOP, R-DPO, SimPO, ORPO) on preference pairs from a config.",
    ),
    "online-dpo": (
        "dockyard.train.cli.online_dpo",
        "Run online DPO: the policy's samples ranked by an LLM judge (engine fleet or OpenAI URL).",
    ),
    "rlaif": (
        "dockyard.train.cli.rlaif",
        "Run RLAIF: a judge critiques the policy's answers against a constitution, revisions become DPO pairs.",
    ),
    "rm": (
        "dockyard.train.cli.rm",
        "Train a reward model (Bradley-Terry) on preference pairs from a config.",
    ),
    "distill": (
        "dockyard.train.cli.distill",
        "Run on-policy distillation from a frozen teacher (top-k KL on the student's samples).",
    ),
    "eval": (
        "dockyard.train.cli.eval",
        "Evaluate models on a benchmark or a held-out set: pass@k, maj@k, breakdowns.",
    ),
    "swe": (
        "dockyard.train.cli.swe",
        "SWE instances: `dockyard swe validate DATASET` (gold patch resolves, empty patch not).",
    ),
    "quickstart": ("dockyard.train.cli.quickstart", "Run the CPU quickstart end to end."),
    "export": (
        "dockyard.train.cli.export",
        "Write a checkpoint's policy as a Hugging Face folder (`dockyard export CKPT OUT`).",
    ),
    "osworld": (
        "dockyard.train.cli.osworld",
        "OSWorld: `replay EPISODE` (an animated GIF), `check DIR` (what loads), `warmstart` (SFT).",
    ),
    "view": (
        "dockyard.train.cli.view",
        "Read runs in a local web page: metrics, each step's episodes, tokens (`dockyard view RUN_DIR`).",
    ),
    "harbor": (
        "dockyard.train.cli.harbor",
        "Harbor task folders: `dockyard harbor validate DIR` (oracle scores 1, empty agent not).",
    ),
}


def commands() -> dict[str, tuple[str, str]]:
    """:data:`COMMANDS`, then the sub-commands installed packages register under
    :data:`COMMAND_GROUP` (their help names the distribution; nothing is imported)."""
    found = dict(COMMANDS)
    for ep in metadata.entry_points(group=COMMAND_GROUP):
        if ep.name not in found:
            dist = ep.dist.name if ep.dist is not None else "an installed package"
            found[ep.name] = (ep.module, f"(from {dist}) see `dockyard {ep.name} --help`.")
    return found


def _version() -> str:
    try:
        return metadata.version("dockyard-train")
    except metadata.PackageNotFoundError:  # running from a source tree without an install
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dockyard",
        description="dockyard: asynchronous RL post-training with execution-grounded rewards.",
    )
    parser.add_argument("--version", action="version", version=f"dockyard {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    known = commands()
    # Parse the command name first; the implementing module then adds its own arguments.
    if argv and argv[0] in known:
        path, help_text = known[argv[0]]
        module = importlib.import_module(path)
        sub = argparse.ArgumentParser(prog=f"dockyard {argv[0]}", description=help_text)
        module.add_arguments(sub)
        return int(module.run(sub.parse_args(argv[1:])) or 0)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


def console_main() -> None:
    """The ``dockyard`` console script (and ``python -m dockyard.train.cli``): :func:`main`,
    then a quick exit.

    A finished command's interpreter otherwise spends 1–2 s tearing down torch, transformers
    and Ray's modules (measured: a process that started Ray took 2.3–2.4 s from its last line
    to its exit, 1.1–1.4 s this way, 2 cores). Nothing of that is needed: Ray is stopped and
    every ``atexit`` handler runs (loggers, W&B, TensorBoard), then ``os._exit``. A command
    that left a non-daemon thread running exits the normal way, so that its work finishes.
    """
    code = main()
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    atexit._run_exitfuncs()  # what the interpreter would run at exit, in the same order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
