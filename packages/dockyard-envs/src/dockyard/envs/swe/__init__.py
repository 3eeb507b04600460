"""The SWE environments: SWE-bench-shaped tasks, diff extraction, and the offline task builder.

The one-shot patch environment is :class:`SweEnvironment` (``swe``); the multi-turn agent is
:class:`dockyard.envs.swe.agent.SweAgentEnvironment` (``swe_agent``, imported from its module).
"""

from dockyard.envs.swe.data import load_shipped_tasks, load_swebench_jsonl
from dockyard.envs.swe.env import SweEnvironment
from dockyard.envs.swe.instance import Instance, materialize
from dockyard.envs.swe.patch import extract_patch
from dockyard.envs.swe.records import SweInstance, load_instances

__all__ = [
    "Instance",
    "SweEnvironment",
    "SweInstance",
    "extract_patch",
    "load_instances",
    "load_shipped_tasks",
    "load_swebench_jsonl",
    "materialize",
]
