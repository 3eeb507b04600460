"""Humanity's Last Exam (HLE) style questions: exact match, multiple choice, or the judge."""

from dockyard.envs.hle.data import hle_dataset, hle_tasks
from dockyard.envs.hle.env import HleEnvironment

__all__ = ["HleEnvironment", "hle_dataset", "hle_tasks"]
