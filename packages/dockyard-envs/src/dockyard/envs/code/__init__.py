"""The code environment (HumanEval-style): completion → held-out tests in the sandbox → reward."""

from dockyard.envs.code.data import humaneval_split, load_humaneval, load_mbpp_jsonl
from dockyard.envs.code.env import CodeEnvironment
from dockyard.envs.code.extract import extract_code

__all__ = [
    "CodeEnvironment",
    "extract_code",
    "humaneval_split",
    "load_humaneval",
    "load_mbpp_jsonl",
]
