"""Air-gapped verifiers (issue 35 item 3, the verifier side): a script verifier with
``egress`` reaches the package registries and the installer table through a proxy of its own
verification — Terminal-Bench 2's shared preamble (uv's install script, then uvx) runs on a node
without the internet — and a host outside them is refused and named: ``needs_network`` for a
task that declares ``allow_internet``, reported beside an unchanged reward otherwise (code under
test asking for the network cannot turn its zero into a masked sample).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.envspec import ScriptTests
from dockyard.sandbox.models import FinishRequest, SessionCreate, Verdict

pytestmark = pytest.mark.slow

REWARD_1 = "echo 1 > /logs/verifier/reward.txt"
PREAMBLE = (  # the shape of Terminal-Bench 2's tests/test.sh (written here, not copied)
    "set -e\n"
    "curl -LsSf https://astral.sh/uv/install.sh | sh\n"
    ". $HOME/.local/bin/env\n"
    "uvx --version\n"
    f"{REWARD_1}\n"
)


def _finish(sb: SandboxClient, script: ScriptTests) -> object:
    sid = sb.create_session(SessionCreate())
    try:
        return sb.finish(sid, FinishRequest(script=script))
    finally:
        sb.delete_session(sid)


def test_the_installer_preamble_runs_offline(
    net_sandbox: SandboxClient, reachable: Callable
) -> None:
    if not reachable("pypi.org", 443):
        pytest.skip("pypi.org cannot be reached from this host (uv comes from its wheel)")
    res = _finish(net_sandbox, ScriptTests(files={"test.sh": PREAMBLE}, egress=True))
    assert res.verdict == Verdict.passed, (res.detail, res.stdout[-2000:], res.stderr[-2000:])
    assert "uv" in res.stdout + res.stderr
    # without the proxy the same verifier has no way out: reward 0, a verdict (the script ran)
    res = _finish(net_sandbox, ScriptTests(files={"test.sh": PREAMBLE}))
    assert res.verdict == Verdict.failed, res.detail


def test_a_host_outside_the_registries_is_named(net_sandbox: SandboxClient) -> None:
    fetch = f"curl -sS --max-time 10 https://example.com/ >/dev/null || true\n{REWARD_1}\n"
    declared = ScriptTests(files={"test.sh": fetch}, egress=True, allow_internet=True)
    res = _finish(net_sandbox, declared)
    assert res.verdict == Verdict.needs_network, res.detail
    assert "example.com" in res.detail
    assert res.reward is None  # never a 0 for a task that needs what this node cannot give
    res = _finish(net_sandbox, ScriptTests(files={"test.sh": fetch}, egress=True))
    assert res.verdict == Verdict.passed  # the script's own reward stands
    assert "example.com" in res.detail


def test_egress_needs_the_services_allow_network(sandbox: SandboxClient) -> None:
    sid = sandbox.create_session(SessionCreate())
    try:
        with pytest.raises(SandboxRequestError) as e:
            sandbox.finish(sid, FinishRequest(script=ScriptTests(files={"test.sh": REWARD_1},
                                                                 egress=True)))  # fmt: skip
        assert e.value.status == 422
        assert "--allow-network" in str(e.value.detail)
    finally:
        sandbox.delete_session(sid)


def test_a_session_with_egress_reaches_the_registries_and_nothing_else(
    net_sandbox: SandboxClient, reachable: Callable
) -> None:
    """``SessionCreate.egress``: the agent's commands and terminal get the registries through a
    proxy of the session (an ``allow_internet`` task's `pip install`), nothing else; without it
    the same command has no way out; the proxy goes with the session."""
    if not reachable("pypi.org", 443):
        pytest.skip("pypi.org cannot be reached from this host")
    get = "curl -sSf --max-time 60 https://pypi.org/simple/six/ > index.html && grep -c six-1.16.0 index.html"
    sid = net_sandbox.create_session(SessionCreate(egress=True))
    try:
        r = net_sandbox.exec(sid, get, timeout_s=120)
        assert r.exit_code == 0, (r.stdout, r.stderr)
        assert int(r.stdout) >= 1  # PyPI's index of six, through the session's proxy
        out = net_sandbox.exec(sid, "curl -sS --max-time 10 https://example.com/ 2>&1; echo rc=$?")
        assert "rc=0" not in out.stdout, out.stdout  # a host outside the registries: refused
        screen = net_sandbox.tty(sid, ["echo proxy=$https_proxy", "<Enter>"], wait_s=1.0).screen
        assert "proxy=http://127.0.0.1:3128" in screen  # the terminal's shell is behind it too
    finally:
        net_sandbox.delete_session(sid)
    sid = net_sandbox.create_session(SessionCreate())
    try:
        r = net_sandbox.exec(sid, get, timeout_s=120)
        assert r.exit_code != 0  # no egress: no network namespace but loopback
    finally:
        net_sandbox.delete_session(sid)


def test_session_egress_needs_the_services_allow_network(sandbox: SandboxClient) -> None:
    with pytest.raises(SandboxRequestError) as e:
        sandbox.create_session(SessionCreate(egress=True))
    assert e.value.status == 422
    assert "--allow-network" in str(e.value.detail)
