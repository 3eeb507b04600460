"""Build the shipped cleanroom tasks: ``python -m dockyard.envs.programbench.build [--out DIR]``.

For each program of :data:`~dockyard.envs.programbench.programs.PROGRAMS`:

1. build the original from ``originals/`` — C with the system ``gcc -O2``; Python as a
   byte-code-only zipapp (``#!/usr/bin/env python3`` + a stored zip holding ``__main__.pyc``,
   compiled by this interpreter: the sandbox must run the same CPython minor version);
2. draw inputs from its generator with a fixed seed: :data:`N_TESTS` distinct held-out ones and
   :data:`N_EXAMPLES` visible ones (not among the held-out);
3. run the original on each input twice with :func:`~dockyard.envs.programbench.probe.run_once`
   (the judge's own function and environment) and keep the input only if both runs agree;
4. fingerprint the original (:func:`~dockyard.envs.programbench.probe.fingerprint`, with the
   other originals and a hello-world as the compiler baseline);
5. write ``DIR/<name>/{executable, README.md, task.json}`` (default: this package's ``data/``).

``task.json``: ``{"name", "language", "examples": [{argv, stdin, stdout, stderr, exit}],
"tests": [...same...], "fingerprint": {"sha256", "windows"}, "python": "3.11" | null}``.
"""

from __future__ import annotations

import argparse
import json
import os
import py_compile
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from dockyard.envs.programbench import probe
from dockyard.envs.programbench.programs import PROGRAMS, Program

HERE = Path(__file__).resolve().parent
ORIGINALS = HERE / "originals"
DATA = HERE / "data"
N_TESTS = 24
N_EXAMPLES = 3
_HELLO = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'


def _gcc(src: Path, out: Path) -> bytes:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise SystemExit("building the C originals needs gcc: apt-get install -y gcc")
    subprocess.run([gcc, "-O2", "-o", str(out), str(src)], check=True, capture_output=True)
    return out.read_bytes()


def _zipapp(src: Path, work: Path) -> bytes:
    pyc = work / "__main__.pyc"
    py_compile.compile(
        str(src), cfile=str(pyc), doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )  # fmt: skip
    zpath = work / "app.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo("__main__.pyc", date_time=(1980, 1, 1, 0, 0, 0))
        z.writestr(info, pyc.read_bytes())
    return b"#!/usr/bin/env python3\n" + zpath.read_bytes()


_CRT = {"_start", "_init", "_fini", "deregister_tm_clones", "register_tm_clones", "frame_dummy"}


def code_ranges(exe: Path) -> list[tuple[int, int]] | None:
    """``[(file offset, size)]`` of the program's own functions in an ELF file (``nm``,
    ``readelf``): start-up code that any gcc build holds, with its layout-dependent
    displacements, stays out of the fingerprint. ``None`` when the tools cannot tell."""
    try:
        sym = subprocess.run(["nm", "-S", "--defined-only", str(exe)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        sec = subprocess.run(["readelf", "-SW", str(exe)], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    text = next((ln.split() for ln in sec.splitlines() if " .text " in ln), None)
    if text is None:
        return None
    i = text.index(".text")
    addr, off = int(text[i + 2], 16), int(text[i + 3], 16)
    out = []
    for ln in sym.splitlines():
        parts = ln.split()
        if (
            len(parts) == 4
            and parts[2] in "tT"
            and parts[3] not in _CRT
            and not parts[3].startswith("__")
        ):
            out.append((int(parts[0], 16) - addr + off, int(parts[1], 16)))
    return sorted(out) or None


def build_original(prog: Program, work: Path) -> bytes:
    """The original executable's bytes."""
    src = ORIGINALS / prog.source
    if src.suffix == ".c":
        return _gcc(src, work / f"{prog.name}.bin")
    return _zipapp(src, work)


def _run_env_path() -> None:
    """The judge runs with the sandbox's PATH, whose first ``python3`` is this interpreter."""
    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = f"{bindir}:/usr/local/bin:/usr/bin:/bin"


def record(exe: bytes, cases: list[tuple[list[str], str]], work: Path) -> list[dict]:
    """Run the original on every input twice; keep the inputs whose two runs agree."""
    run_dir = work / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "executable").write_bytes(exe)
    os.chmod(run_dir / "executable", 0o755)
    out = []
    for argv, stdin in cases:
        a = probe.run_once(argv, stdin, str(run_dir), 10.0)
        b = probe.run_once(argv, stdin, str(run_dir), 10.0)
        if a == b and a["exit"] >= 0:
            out.append({"argv": argv, "stdin": stdin, **a})
    return out


def draw(prog: Program, seed: str, n: int, exclude: set[str]) -> list[tuple[list[str], str]]:
    rng = random.Random(f"{prog.name}-{seed}")
    seen = set(exclude)
    cases = []
    for _ in range(50 * n):
        argv, stdin = prog.gen(rng)
        key = json.dumps([argv, stdin])
        if key not in seen:
            seen.add(key)
            cases.append((argv, stdin))
        if len(cases) == n:
            break
    return cases


def build(out: Path = DATA, names: list[str] | None = None) -> list[str]:
    """Build the tasks into ``out``; returns their names."""
    _run_env_path()
    progs = [p for p in PROGRAMS if names is None or p.name in names]
    with tempfile.TemporaryDirectory(prefix="dockyard-programbench-") as tmp:
        work = Path(tmp)
        exes: dict[str, bytes] = {}
        ranges: dict[str, list[tuple[int, int]] | None] = {}
        for p in progs:
            (work / p.name).mkdir()
            exes[p.name] = build_original(p, work / p.name)
            bin_path = work / p.name / f"{p.name}.bin"
            ranges[p.name] = code_ranges(bin_path) if bin_path.exists() else None
        hello_c = work / "hello.c"
        hello_c.write_text(_HELLO)
        hello = _gcc(hello_c, work / "hello.bin")
        out.mkdir(parents=True, exist_ok=True)
        for i, p in enumerate(progs, 1):
            held = draw(p, "heldout", N_TESTS, set())
            visible = draw(p, "visible", N_EXAMPLES, {json.dumps([a, s]) for a, s in held})
            tests = record(exes[p.name], held, work / p.name)
            examples = record(exes[p.name], visible, work / p.name / "v")
            if len(tests) < 20:
                raise SystemExit(f"{p.name}: only {len(tests)} deterministic held-out tests")
            if len({json.dumps([t["stdout"], t["stderr"], t["exit"]]) for t in tests}) < 5:
                raise SystemExit(f"{p.name}: the held-out tests hardly differ: fix its generator")
            baseline = [hello, *(b for n, b in exes.items() if n != p.name)]
            lang = "c" if p.source.endswith(".c") else "python"
            task = {
                "name": p.name,
                "language": lang,
                "python": f"{sys.version_info.major}.{sys.version_info.minor}"
                if lang == "python"
                else None,
                "examples": examples,
                "tests": tests,
                "fingerprint": probe.fingerprint(exes[p.name], baseline, ranges[p.name]),
            }
            d = out / p.name
            d.mkdir(exist_ok=True)
            (d / "executable").write_bytes(exes[p.name])
            (d / "README.md").write_text(p.doc)
            (d / "task.json").write_text(json.dumps(task, indent=1, sort_keys=True) + "\n")
            print(
                f"[{i}/{len(progs)}] {p.name}: {len(tests)} held-out tests, "
                f"{len(task['fingerprint']['windows'])} fingerprint windows",
                flush=True,
            )
    return [p.name for p in progs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA, help="where to write the tasks")
    ap.add_argument("names", nargs="*", help="only these programs (default: all)")
    args = ap.parse_args(argv)
    build(args.out, args.names or None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
