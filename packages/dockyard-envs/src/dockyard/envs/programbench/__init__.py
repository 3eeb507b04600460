"""ProgramBench-style cleanroom reconstruction: rebuild a program from its behaviour
(docs/envs/programbench.md)."""

from dockyard.envs.programbench.env import (
    ProgramBenchEnvironment,
    ProgramBenchSingleTurnEnvironment,
)
from dockyard.envs.programbench.tasks import load_programbench_tasks

__all__ = [
    "ProgramBenchEnvironment",
    "ProgramBenchSingleTurnEnvironment",
    "load_programbench_tasks",
]
