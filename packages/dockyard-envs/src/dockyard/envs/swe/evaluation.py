"""How an instance's held-out tests are run: the fields a sandbox ``Task`` / ``FinishRequest``
needs, from the instance, its materialised manifest (if any) and its environment spec.

* held out: a manifest's ``test_files`` (force-restored), else the record's ``test_patch``;
* tests: ``FAIL_TO_PASS`` + ``PASS_TO_PASS`` through the sandbox's pytest runner when the spec's
  test command is pytest-driven (:attr:`EnvSetup.uses_our_runner`) — on the image's Python for a
  layered environment — else the spec's ``test_command`` whose log
  :func:`~dockyard.envs.swe.logverdict.judge_log` reads.

One place for the agent environment's ``finish`` and ``dockyard swe validate``.
"""

from __future__ import annotations

from typing import Any

from dockyard.envs.swe.instance import Instance
from dockyard.envs.swe.logverdict import test_command
from dockyard.envs.swe.records import SweInstance
from dockyard.envs.swe.specs import EnvSetup
from dockyard.sandbox.models import TestsSpec


def evaluation_fields(
    rec: SweInstance, inst: Instance | None, setup: EnvSetup, python: str | None = None
) -> dict[str, Any]:
    """``test_files`` or ``test_patch``, and ``tests`` or ``test_command`` (module docstring).
    ``python``: the interpreter of the sandbox's runner (``Provisioning.python``: the image's
    for a layered environment, None for the sandbox's own)."""
    fields: dict[str, Any] = (
        {"test_files": inst.test_files} if inst is not None else {"test_patch": rec.test_patch}
    )
    if setup.uses_our_runner:
        fields["tests"] = TestsSpec(
            fail_to_pass=rec.fail_to_pass, pass_to_pass=rec.pass_to_pass, python=python
        )
    else:
        fields["test_command"] = test_command(setup, rec.to_task())
    return fields
