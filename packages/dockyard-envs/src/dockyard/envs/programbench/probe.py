"""The cleanroom judge that runs *inside* the scoring sandbox (stdlib only, no dockyard import).

It is sent as a held-out, root-owned, read-only file under a per-call random module name, and
the sandbox's ``calls`` runner calls ``judge(op, arg)`` once per case of the request's
``function_tests``. The return values travel as plain JSON to the trusted service, which
compares them there with the ``expected`` values (the original's recorded outputs, which never
enter the sandbox). Cases run in order:

====================  ========================================================  ===========
op                    what it returns                                           expected
====================  ========================================================  ===========
``copy``              the submission holds a file whose SHA-256 is the          ``False``
                      original's (checked first: nothing of the submission has
                      run yet)
``embedded``          a file holds ≥ 48 contiguous bytes of the original's     ``False``
                      code — raw, or decoded from base64, hex, ``0x..`` / ``\\x..``
                      / decimal byte arrays, gzip/xz/bz2/zip
``network``           ``compile.sh`` or a source fetches from the network or   ``False``
                      opens sockets (the sandbox has none: attempts fail, and
                      are flagged here)
``build``             ``bash compile.sh`` exited 0 within its time limit and   ``True``
                      left a new ``./executable``
``built_copy``        after the build: ``copy`` / ``embedded`` over the         ``False``
                      workspace and ``/tmp`` (a decoder in ``compile.sh``)
``run``               ``{"stdout", "stderr", "exit"}`` of ``./executable`` on   recorded
                      ``arg["argv"]`` / ``arg["stdin"]``
``execs_original``    the tripwire at the original's path fired during the     ``False``
                      build or a run
``runtime_copy``      ``built_copy`` again after every run (files a run wrote)  ``False``
====================  ========================================================  ===========

Before anything else the judge removes ``./executable`` (the original, in a multi-turn
session's base tree) and puts a *tripwire* there: a script that prints a nonce and exits 127.
``compile.sh`` must create its own ``./executable``; a wrapper that calls the old path runs
the tripwire instead, which the judge sees (nonce in the output, or its marker file).

The judge makes itself non-dumpable (no same-uid process can open ``/proc/<judge>/fd`` to
forge report records), drops the workspace from ``sys.path`` before importing anything (a
planted ``subprocess.py`` cannot shadow the standard library), and runs the submission with a
fixed environment in its own process group, killed whole on timeout.
"""

import sys

WORKSPACE = "/workspace"
sys.path[:] = [p for p in sys.path if p and not p.startswith(WORKSPACE)]

import base64  # noqa: E402  (after the sys.path cleanup, on purpose)
import binascii  # noqa: E402
import bz2  # noqa: E402
import contextlib  # noqa: E402
import ctypes  # noqa: E402
import gzip  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import lzma  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import zipfile  # noqa: E402

WINDOW = 32
"""Bytes per fingerprint window; windows start every ``STRIDE`` bytes of the original, so any
copied run of ≥ WINDOW + STRIDE = 48 bytes holds a whole one."""
STRIDE = 16
MAX_SCAN_BYTES = 8 << 20
"""Bytes of the tree (and of what decodes from it) that the scan reads; past it: flagged."""
SKIP_DIRS = {".git", "__pycache__"}
NONCE = os.urandom(8).hex()
TRIPWIRE = (
    "#!/bin/sh\n"
    f"echo 'dockyard-cleanroom-tripwire-{NONCE}: the original executable is not available "
    "when a submission is judged' >&2\n"
    f": > /tmp/.dockyard-tripwire-{NONCE} 2>/dev/null\n"
    "exit 127\n"
)
_state = {"prepared": False, "built": False, "tripped": False, "notes": []}


def _nondumpable() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


_nondumpable()


# -- fingerprints (also used by the builder, outside the sandbox) ----------------------------


def digest(window: bytes) -> str:
    return hashlib.blake2b(window, digest_size=8).hexdigest()


def _texty(w: bytes) -> bool:
    """Mostly printable text (strings a faithful rebuild shares) or low-entropy padding."""
    printable = sum(1 for b in w if 32 <= b < 127 or b in (9, 10, 13))
    return printable * 4 > len(w) * 3 or len(set(w)) < 8


def fingerprint(original: bytes, baseline: list, ranges=None) -> dict:
    """``{"sha256", "windows"}`` of ``original``: digests of its WINDOW-byte windows at every
    STRIDE-th offset inside ``ranges`` (``[(file offset, size)]``: the program's own functions;
    default the whole file), minus text-like windows and any window found in ``baseline``
    binaries (other programs built by the same compiler)."""
    spans = ranges or [(0, len(original))]
    common = set()
    for other in baseline:
        common.update(digest(other[i : i + WINDOW]) for i in range(len(other) - WINDOW + 1))
    wins = []
    seen = set()
    offsets = sorted({i for a, n in spans for i in range(a, a + n - WINDOW + 1, STRIDE)})
    for i in offsets:
        w = original[i : i + WINDOW]
        d = digest(w)
        if d in common or d in seen or _texty(w):
            continue
        seen.add(d)
        wins.append(d)
    return {"sha256": hashlib.sha256(original).hexdigest(), "windows": wins}


# -- decoding what a file might hide --------------------------------------------------------

_B64 = re.compile(rb"[A-Za-z0-9+/]{64,}={0,2}")
_HEXRUN = re.compile(rb"[0-9a-fA-F]{64,}")
_HEX0X = re.compile(rb"0[xX]([0-9a-fA-F]{1,2})\b")
_HEXESC = re.compile(rb"\\x([0-9a-fA-F]{2})")
_DEC = re.compile(rb"(?:\b\d{1,3}\s*,\s*){47,}\d{1,3}\b")
_WS = re.compile(rb"[\s\"'\\]+|\\n")


def _decodings(data: bytes) -> list:
    """Byte strings a text file may encode (each a candidate to scan)."""
    out = []
    flat = _WS.sub(b"", data)
    for m in _B64.finditer(flat):
        run = m.group(0).rstrip(b"=")
        for k in range(4):
            part = run[k:]
            part = part[: len(part) - len(part) % 4]
            with contextlib.suppress(binascii.Error, ValueError):
                out.append(base64.b64decode(part, validate=True))
    for m in _HEXRUN.finditer(flat):
        run = m.group(0)
        for k in range(2):
            part = run[k:]
            out.append(bytes.fromhex(part[: len(part) - len(part) % 2].decode()))
    hx = _HEX0X.findall(data)
    if len(hx) >= 48:
        out.append(bytes(int(h, 16) for h in hx))
    esc = _HEXESC.findall(data)
    if len(esc) >= 48:
        out.append(bytes(int(h, 16) for h in esc))
    for m in _DEC.finditer(data):
        nums = [int(x) for x in re.findall(rb"\d+", m.group(0))]
        if all(n < 256 for n in nums):
            out.append(bytes(nums))
    return out


def _unpacked(data: bytes) -> list:
    """Contents of a compressed file or archive (gzip, xz, bz2, zip)."""
    out = []
    try:
        if data[:2] == b"\x1f\x8b":
            out.append(gzip.decompress(data)[:MAX_SCAN_BYTES])
        elif data[:6] == b"\xfd7zXZ\x00":
            out.append(lzma.decompress(data)[:MAX_SCAN_BYTES])
        elif data[:3] == b"BZh":
            out.append(bz2.decompress(data)[:MAX_SCAN_BYTES])
        elif zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for name in z.namelist()[:200]:
                    out.append(z.read(name)[:MAX_SCAN_BYTES])
    except Exception:  # not what the magic says: nothing to unpack
        pass
    return out


class _Scan:
    def __init__(self, fp: dict) -> None:
        self.sha = fp["sha256"]
        self.windows = {bytes.fromhex(w) for w in fp["windows"]}
        self.budget = MAX_SCAN_BYTES

    def holds(self, data: bytes) -> bool:
        """Does ``data`` contain a fingerprint window at any offset?"""
        if not self.windows:
            return False
        b2 = hashlib.blake2b
        ws = self.windows
        return any(
            b2(data[i : i + WINDOW], digest_size=8).digest() in ws
            for i in range(len(data) - WINDOW + 1)
        )

    def check(self, rel: str, data: bytes, depth: int = 0) -> list:
        """Findings for one file's bytes (and what they decode to)."""
        self.budget -= len(data)
        if self.budget < 0:
            return [f"{rel}: over the scan budget of {MAX_SCAN_BYTES} bytes"]
        if hashlib.sha256(data).hexdigest() == self.sha:
            return [f"copy:{rel}"]
        if self.holds(data):
            return [f"embedded:{rel}"]
        if depth < 2:
            for inner in _unpacked(data) + (_decodings(data) if b"\x00" not in data else []):
                found = self.check(rel + "!decoded", inner, depth + 1)
                if found:
                    return [f.replace("copy:", "embedded:") for f in found]
        return []


def _read_only(path: str) -> bool:
    """``path`` is on a read-only mount (the toolchain bound into the jail, which may live under
    ``/tmp`` on the host): nothing there was written by the submission."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _files(root: str, skip: set) -> list:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [
            d for d in dirnames if d not in SKIP_DIRS and not _read_only(os.path.join(dirpath, d))
        ]
        for f in filenames:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if rel in skip or os.path.islink(p) or not os.path.isfile(p):
                continue
            out.append((rel, p))
    return sorted(out)


def _read(p: str) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(MAX_SCAN_BYTES + 1)
    except OSError:
        return b""


def _prepare(arg: dict) -> None:
    """Remove the original's path and put the tripwire there (once, before anything runs)."""
    if _state["prepared"]:
        return
    _state["prepared"] = True
    exe = os.path.join(WORKSPACE, "executable")
    if os.path.lexists(exe):
        if os.path.isdir(exe) and not os.path.islink(exe):
            shutil.rmtree(exe, ignore_errors=True)
        else:
            os.remove(exe)
    with open(exe, "w") as f:
        f.write(TRIPWIRE)
    os.chmod(exe, 0o755)


def _skip(arg: dict) -> set:
    return {*arg.get("skip", []), "executable"}


def _scan_tree(arg: dict, roots: list, kinds: tuple) -> bool:
    sc = _Scan(arg["fingerprint"])
    found = []
    for root in roots:
        skip = _skip(arg) if root == WORKSPACE else set()
        for rel, p in _files(root, skip):
            hits = sc.check(os.path.join(root, rel), _read(p))
            found += [f for f in hits if f.startswith(kinds) or "budget" in f]
    _state["notes"] += found
    for f in found:
        print(f"cleanroom: {f}", file=sys.stderr)
    return bool(found)


_NET = [
    re.compile(rb"\b(curl|wget|nc|ncat|telnet|ssh|scp|rsync|ftp)\s"),
    re.compile(rb"\b(pip3?|uv|apt(-get)?|npm|cargo|go)\s+(install|get|add|download|fetch)\b"),
    re.compile(rb"\bgit\s+(clone|fetch|pull)\b"),
    re.compile(rb"https?://|ftp://|/dev/(tcp|udp)/"),
    re.compile(rb"\bimport\s+(socket|urllib\.request|http\.client|requests|httpx)\b"),
    re.compile(rb"<(sys/socket|netdb|arpa/inet)\.h>"),
]


def _network(arg: dict) -> bool:
    found = []
    for rel, p in _files(WORKSPACE, _skip(arg)):
        data = _read(p)
        if b"\x00" in data:
            continue
        for pat in _NET:
            m = pat.search(data)
            if m:
                found.append(f"network:{rel}: {m.group(0)[:40]!r}")
                break
    _state["notes"] += found
    for f in found:
        print(f"cleanroom: {f}", file=sys.stderr)
    return bool(found)


def _env() -> dict:
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def run_once(argv: list, stdin: str, cwd: str, timeout_s: float) -> dict:
    """``{"stdout", "stderr", "exit"}`` of ``./executable argv…`` (exit -9 on timeout). The
    builder records the original's outputs with this very function."""
    p = subprocess.Popen(
        ["./executable", *argv],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(stdin.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return {"stdout": _text(out[:65536]), "stderr": "timeout", "exit": -9}
    finally:
        with contextlib.suppress(OSError):  # whatever it left running
            os.killpg(p.pid, signal.SIGKILL)
    return {"stdout": _text(out[: 1 << 20]), "stderr": _text(err[: 1 << 20]), "exit": p.returncode}


def _tripped(*outputs: str) -> bool:
    hit = any(f"tripwire-{NONCE}" in o for o in outputs) or os.path.exists(
        f"/tmp/.dockyard-tripwire-{NONCE}"
    )
    if hit and not _state["tripped"]:
        _state["tripped"] = True
        print("cleanroom: the original's path was executed", file=sys.stderr)
    return hit


def _build(arg: dict) -> bool:
    if not os.path.isfile(os.path.join(WORKSPACE, "compile.sh")):
        print("cleanroom: no compile.sh in the submission", file=sys.stderr)
        return False
    p = subprocess.Popen(
        ["bash", "compile.sh"],
        cwd=WORKSPACE,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = p.communicate(timeout=float(arg.get("timeout_s", 60)))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        print("cleanroom: compile.sh timed out", file=sys.stderr)
        return False
    finally:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
    log = _text(out)
    _tripped(log)
    sys.stderr.write("compile.sh output (tail):\n" + log[-2000:] + "\n")
    exe = os.path.join(WORKSPACE, "executable")
    try:
        with open(exe, "rb") as f:
            still_tripwire = f.read(len(TRIPWIRE) + 1) == TRIPWIRE.encode()
    except OSError:
        still_tripwire = True
    if p.returncode != 0 or still_tripwire:
        print(
            f"cleanroom: build failed (exit {p.returncode}; new ./executable: "
            f"{not still_tripwire})",
            file=sys.stderr,
        )
        return False
    _state["built"] = True
    return True


def judge(op: str, arg: dict):
    """One case (see the module docstring)."""
    _prepare(arg)
    if op == "copy":
        return _scan_tree(arg, [WORKSPACE], ("copy:",))
    if op == "embedded":
        return _scan_tree(arg, [WORKSPACE], ("embedded:",))
    if op == "network":
        return _network(arg)
    if op == "build":
        return _build(arg)
    if op in ("built_copy", "runtime_copy"):
        return _scan_tree_all(arg)
    if op == "run":
        if not _state["built"]:
            return {"error": "no executable was built"}
        res = run_once(
            list(arg["argv"]), arg.get("stdin", ""), WORKSPACE, float(arg.get("timeout_s", 10))
        )
        _tripped(res["stdout"], res["stderr"])
        return res
    if op == "execs_original":
        return _state["tripped"] or _tripped()
    raise ValueError(f"unknown op {op!r}")


def _scan_tree_all(arg: dict) -> bool:
    """Copy/embedded over the workspace (the built ``./executable`` included) and ``/tmp``."""
    sc = _Scan(arg["fingerprint"])
    found = []
    skip = set(arg.get("skip", []))
    for root in (WORKSPACE, "/tmp"):
        for rel, p in _files(root, skip if root == WORKSPACE else set()):
            found += sc.check(os.path.join(root, rel), _read(p))
    _state["notes"] += found
    for f in found:
        print(f"cleanroom: {f}", file=sys.stderr)
    return bool(found)
