"""Math environments: answer extraction, math-verify under a timeout, multiple choice, data."""

from dockyard.envs.math.data import ArithmeticGenerator, load_math_jsonl
from dockyard.envs.math.env import MathEnvironment, MultipleChoiceEnvironment
from dockyard.envs.math.extract import extract_answer, extract_choice
from dockyard.envs.math.verify import MathVerifier

__all__ = [
    "ArithmeticGenerator",
    "MathEnvironment",
    "MathVerifier",
    "MultipleChoiceEnvironment",
    "extract_answer",
    "extract_choice",
    "load_math_jsonl",
]
