"""The shipped Harbor tasks keep two copies of their input generators on purpose.

A task directory is self-contained: ``environment/`` builds the agent's starting inputs (its
generator is deleted from /app after the build, so the agent cannot read it) and ``tests/``
rebuilds the same pristine inputs, held out, for the verifier to recompute the answer from. A
file of the same name in both folders is one generator in two places: if one copy drifts, the
verifier grades against inputs the agent never saw. Nothing else keeps them in step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard.envs.harbor.tasks import SHIPPED


def _pairs() -> list[tuple[Path, Path]]:
    pairs = []
    for task in sorted(p for p in SHIPPED.iterdir() if p.is_dir()):
        env, tests = task / "environment", task / "tests"
        if not (env.is_dir() and tests.is_dir()):
            continue
        for f in sorted(env.iterdir()):
            twin = tests / f.name
            if f.is_file() and f.name != "Dockerfile" and twin.is_file():
                pairs.append((f, twin))
    return pairs


PAIRS = _pairs()


def test_some_shipped_tasks_share_a_generator() -> None:
    assert len(PAIRS) >= 10, [str(a) for a, _ in PAIRS]


@pytest.mark.parametrize(
    ("env_copy", "test_copy"), PAIRS, ids=[f"{a.parent.parent.name}/{a.name}" for a, _ in PAIRS]
)
def test_the_environment_and_verifier_copies_are_identical(env_copy: Path, test_copy: Path) -> None:
    assert env_copy.read_bytes() == test_copy.read_bytes(), (
        f"{env_copy} and {test_copy} differ: the verifier would rebuild inputs the agent never "
        "saw; change both copies together"
    )
