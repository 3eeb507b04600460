"""The terminal environment: multi-turn tool use in a sandbox session."""

from dockyard.envs.terminal.env import TerminalEnvironment
from dockyard.envs.terminal.tasks import load_terminal_tasks

__all__ = ["TerminalEnvironment", "load_terminal_tasks"]
