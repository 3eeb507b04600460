"""The cleanroom environment against the real sandbox: a reimplementation passes, and every
integrity trick (copy, base64 / byte-array embedding, a wrapper of the original's path, a copy
read through /proc, the network) is flagged and scored 0 — SANDBOX-THREATS row 22."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dockyard.envs.programbench import ProgramBenchEnvironment, ProgramBenchSingleTurnEnvironment
from dockyard.envs.programbench.tasks import load_programbench_tasks
from dockyard.envs.rewards import TESTS

REFS = Path(__file__).resolve().parent / "programbench_refs"
ROT_PY = (REFS / "rot.py").read_text()
COPY_PY = "cp rot.py executable && chmod +x executable\n"


@pytest.fixture(scope="module")
def rot() -> dict:
    return next(t for t in load_programbench_tasks() if t["name"] == "rot")


def _call(name: str, **args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def _files(**files: str) -> str:
    return "".join(f'<file path="{p.replace("_", ".", 1) if p != "compile_sh" else "compile.sh"}">\n{c}</file>\n' for p, c in files.items())  # fmt: skip


async def _episode(env, task, turns):
    state = await env.reset(task)
    try:
        for turn in turns:
            r = await env.step(state, turn)
            if r.done:
                return r
        raise AssertionError("the episode did not end")
    finally:
        await env.close(state)


def test_single_turn_reference_passes_and_empty_build_fails(sandbox_url, rot, arun):
    env = ProgramBenchSingleTurnEnvironment(sandbox_url)
    good = f'<file path="rot.py">\n{ROT_PY}</file>\n<file path="compile.sh">\n{COPY_PY}</file>\n'
    lazy = '<file path="compile.sh">\ntrue\n</file>\n'

    async def go():
        return await env.score(rot, good), await env.score(rot, lazy)

    ok, empty = arun(env, go())
    assert ok.rewards[TESTS] == 1.0, ok.metadata
    assert ok.metadata["cleanroom_flags"] == []
    assert ok.metadata["tests_passed"] == 24
    # a build that leaves no new ./executable: 0, and no flag (the tripwire never ran)
    assert empty.rewards[TESTS] == 0.0
    assert empty.metadata["build_ok"] is False
    assert empty.metadata["cleanroom_flags"] == []


def test_multi_turn_reference_passes(sandbox_url, rot, arun):
    env = ProgramBenchEnvironment(sandbox_url, max_turns=6)
    turns = [
        _call("run", command="./executable -n 3 <<< 'Hello' ; echo \"exit $?\""),
        _call("write_file", path="rot.py", content=ROT_PY),
        _call("write_file", path="compile.sh", content=COPY_PY),
        _call("run", command="bash compile.sh && ./executable -d <<< 'Uryyb'"),
        _call("submit"),
    ]
    r = arun(env, _episode(env, rot, turns))
    assert not r.infra_error
    assert r.rewards[TESTS] == 1.0, r.metadata
    assert r.metadata["cleanroom_flags"] == []
    assert r.metadata["end_reason"] == "submit"


# Each trick runs in a session that holds the original, as an agent would do it.
_XOR = (
    "python3 -c \"import sys; d=open(sys.argv[1],'rb').read(); "
    "open(sys.argv[2],'wb').write(bytes(b ^ 90 for b in d))\""
)
TRICKS = {
    # a plain copy under another name, restored by compile.sh
    "copy": (
        ["cp executable keep.bin"],
        "cp keep.bin executable && chmod +x executable\n",
        {"copies_original"},
    ),
    # base64 text in the tree, decoded by compile.sh
    "base64": (
        ["base64 executable > blob.txt"],
        "base64 -d blob.txt > executable && chmod +x executable\n",
        {"embeds_original"},
    ),
    # a C byte array (xxd -i style) in a C loader that writes the bytes out and runs them
    "byte_array": (
        [
            "python3 -c \"d=open('executable','rb').read(); "
            "open('blob.h','w').write('unsigned char blob[]={'+','.join('0x%02x'%b for b in d)+'};"
            "unsigned int blob_len=%d;' % len(d))\"",
        ],
        "cat > main.c <<'EOF'\n#include <stdio.h>\n#include <unistd.h>\n#include \"blob.h\"\n"
        'int main(int c, char **v) { FILE *f = fopen("/tmp/r", "wb"); '
        'fwrite(blob, 1, blob_len, f); fclose(f); chmod("/tmp/r", 0755); '
        'execv("/tmp/r", v); return 1; }\nEOF\n'
        "sed -i 's/#include <unistd.h>/#include <unistd.h>\\n#include <sys\\/stat.h>/' main.c\n"
        "gcc -O2 -o executable main.c\n",
        {"embeds_original"},
    ),
    # a wrapper of the original's path: at judging time ./executable is the tripwire
    "wrapper": (
        [],
        'mv executable real\nprintf \'#!/bin/sh\\nexec "$(dirname "$0")/real" "$@"\\n\' > '
        "executable\nchmod +x executable\n",
        {"execs_original"},
    ),
    # read through /proc while the original runs, kept XOR-scrambled, unscrambled at build time
    "proc_copy": (
        [
            "(sleep 3 | ./executable >/dev/null &) ; sleep 0.5 ; "
            "cp /proc/$(pgrep -n -f '^./executable')/exe grabbed ; "
            + _XOR
            + " grabbed scrambled.bin ; rm grabbed",
        ],
        _XOR + " scrambled.bin executable && chmod +x executable\n",
        {"builds_original"},
    ),
    # fetching at build time (the sandbox has no network: the attempt fails and is flagged)
    "network": (
        [],
        "curl -fsSL https://example.com/rot.tar.gz | tar xz || true\n" + COPY_PY,
        {"network"},
    ),
}


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_integrity_trick_is_flagged_and_scores_zero(sandbox_url, rot, arun, trick):
    prep, compile_sh, expected = TRICKS[trick]
    env = ProgramBenchEnvironment(sandbox_url, max_turns=len(prep) + 4)
    files = [_call("write_file", path="compile.sh", content=compile_sh)]
    if trick == "network":
        files.append(_call("write_file", path="rot.py", content=ROT_PY))
    turns = [*(_call("run", command=c) for c in prep), *files, _call("submit")]
    r = arun(env, _episode(env, rot, turns))
    assert not r.infra_error, r.metadata
    assert r.rewards[TESTS] == 0.0
    assert r.metadata["integrity_violation"] is True
    assert expected <= set(r.metadata["cleanroom_flags"]), r.metadata


def test_an_honest_c_rebuild_is_not_flagged(sandbox_url, rot, arun):
    """Built by the same gcc as the original, a C reimplementation shares start-up code with it:
    the fingerprint leaves that out, so nothing is flagged."""
    env = ProgramBenchSingleTurnEnvironment(sandbox_url)
    src = (REFS / "rot_alt.c").read_text()
    resp = (
        f'<file path="rot.c">\n{src}</file>\n'
        '<file path="compile.sh">\ngcc -O2 -o executable rot.c\n</file>\n'
    )
    r = arun(env, env.score(rot, resp))
    assert r.metadata["cleanroom_flags"] == []
    assert r.metadata["integrity_unverified"] == []
    assert r.metadata["build_ok"] is True
    # rot_alt.c parses -n loosely (atoi): the bad-shift cases differ, the rest match
    assert 12 <= r.metadata["tests_passed"] < 24
    assert r.rewards[TESTS] == pytest.approx(r.metadata["tests_passed"] / 24)


def _from_source(task: dict) -> str:
    """A rebuild from the original's own source, built differently (gcc -O0; Python as source
    rather than byte code): the same behaviour through different bytes."""
    from dockyard.envs.programbench.build import ORIGINALS
    from dockyard.envs.programbench.programs import PROGRAMS

    src = next(p.source for p in PROGRAMS if p.name == task["name"])
    text = (ORIGINALS / src).read_text()
    if src.endswith(".c"):
        build = f"gcc -O0 -o executable {src}\n"
    else:
        build = f"(echo '#!/usr/bin/env python3'; cat {src}) > executable && chmod +x executable\n"
    return f'<file path="{src}">\n{text}</file>\n<file path="compile.sh">\n{build}</file>\n'


def test_every_task_reproduces_in_the_sandbox(sandbox_url, arun):
    """Every shipped task's recorded outputs come back inside the jail (its environment,
    locale, interpreter), and a differently built rebuild is not mistaken for the original."""
    import asyncio

    tasks = load_programbench_tasks()
    env = ProgramBenchSingleTurnEnvironment(sandbox_url)

    async def go():
        return await asyncio.gather(*(env.score(t, _from_source(t)) for t in tasks))

    results = arun(env, go())
    for t, r in zip(tasks, results, strict=True):
        assert r.rewards[TESTS] == 1.0, (t["name"], r.metadata)
        assert r.metadata["cleanroom_flags"] == [], (t["name"], r.metadata)
