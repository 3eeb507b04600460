"""How a sandbox verdict becomes a step (dockyard.envs.sandboxed.verdict_to_step): what the
policy's content caused is scored, what the node could not give is masked and named."""

from __future__ import annotations

from dockyard.envs.sandboxed import OUTPUT_TAIL, verdict_to_step
from dockyard.sandbox.models import TaskResult, Verdict


def test_needs_network_is_masked_and_named_never_a_zero() -> None:
    r = TaskResult(verdict=Verdict.needs_network, detail="needs_network: github.com")
    step = verdict_to_step(r)
    assert step.infra_error  # masked by the trainer: not the policy's doing
    assert step.rewards == {}
    assert step.metadata["needs_network"] is True
    assert "github.com" in step.metadata["infra_reason"]


def test_a_verdict_keeps_bounded_verifier_output() -> None:
    r = TaskResult(verdict=Verdict.failed, stdout="x" * 10_000 + "END", stderr="boom")
    step = verdict_to_step(r)
    assert not step.infra_error
    assert step.rewards["reward/tests"] == 0.0
    assert step.metadata["stdout"].endswith("END")
    assert len(step.metadata["stdout"]) == OUTPUT_TAIL
    assert step.metadata["stderr"] == "boom"
