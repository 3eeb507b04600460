"""The sandbox's Localhost seccomp profile (dockyard.k8s.seccomp): the runtime's default with
bubblewrap's calls allowed without a capability, and nothing else changed."""

from __future__ import annotations

import json

import pytest

from dockyard.k8s.seccomp import BWRAP_CALLS, bwrap_profile, main

DEFAULT = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [
        {"names": ["read", "write", "mount"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["sethostname", "setns", "bpf"], "action": "SCMP_ACT_ALLOW",
         "includes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["sethostname", "setns"], "action": "SCMP_ACT_ERRNO",
         "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"},
    ],
}  # fmt: skip


def _rules(profile: dict, name: str) -> list[dict]:
    return [r for r in profile["syscalls"] if name in r["names"]]


def test_bwraps_calls_are_allowed_without_a_capability_and_the_rest_is_kept() -> None:
    out = bwrap_profile(DEFAULT)
    for call in BWRAP_CALLS:  # exactly one rule each: the unconditional allow
        (rule,) = _rules(out, call)
        assert rule == {"names": list(BWRAP_CALLS), "action": "SCMP_ACT_ALLOW"}
    (bpf,) = _rules(out, "bpf")  # still gated on the capability
    assert bpf["includes"] == {"caps": ["CAP_SYS_ADMIN"]}
    assert _rules(out, "ptrace")[0]["action"] == "SCMP_ACT_ERRNO"
    assert _rules(out, "read")[0]["names"] == ["read", "write"]
    assert out["defaultAction"] == "SCMP_ACT_ERRNO"
    assert DEFAULT["syscalls"][0]["names"] == ["read", "write", "mount"]  # input untouched


def test_the_command_writes_the_profile_and_refuses_what_is_not_one(tmp_path, capsys) -> None:
    src = tmp_path / "default.json"
    src.write_text(json.dumps(DEFAULT))
    assert main([str(src)]) == 0
    assert json.loads(capsys.readouterr().out) == bwrap_profile(DEFAULT)
    src.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW"}))
    assert main([str(src)]) == 2
    assert "no 'syscalls' list" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])
