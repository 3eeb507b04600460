"""The SWE environment: SWE-bench-shaped tasks, diff extraction, and the offline task builder."""

from dockyard.envs.swe.data import load_shipped_tasks, load_swebench_jsonl
from dockyard.envs.swe.env import SweEnvironment
from dockyard.envs.swe.instance import Instance, materialize
from dockyard.envs.swe.patch import extract_patch

__all__ = [
    "Instance",
    "SweEnvironment",
    "extract_patch",
    "load_shipped_tasks",
    "load_swebench_jsonl",
    "materialize",
]
