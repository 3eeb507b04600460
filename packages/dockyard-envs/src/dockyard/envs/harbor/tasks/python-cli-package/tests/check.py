"""Held-out checks for the tally package; prints the reward (fraction of checks passed).

Expected outputs are computed here from the specification, on texts the agent never saw.
"""

import collections
import importlib
import os
import re
import subprocess
import sys
import tempfile
import tomllib

APP = "/app"
sys.dont_write_bytecode = True
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
tmp = tempfile.mkdtemp()
results = []


def check(name, fn):
    try:
        ok = bool(fn())
    except Exception as e:  # a crash is a failed check
        print(f"  {name}: {type(e).__name__}: {e}", file=sys.stderr)
        ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {name}", file=sys.stderr)
    results.append(ok)


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


A = write("a.txt", "It's the end of the world as we know it,\nand I feel fine.\nThe END\n\n")
B = write("b.txt", "one two three two three three 42 42 42 42\nit's IT it")
STDIN = "alpha beta\nBeta gamma beta\n"


def expect(texts, top=3, ignore_case=False):
    """Counts per text (a word never spans two files), summed."""
    words = [
        w for t in texts for w in re.findall(r"[A-Za-z0-9']+", t.lower() if ignore_case else t)
    ]
    c = collections.Counter(words)
    lines, chars = sum(t.count("\n") for t in texts), sum(len(t) for t in texts)
    out = [f"lines {lines} words {len(words)} chars {chars}"]
    out += [f"{n} {w}" for w, n in sorted(c.items(), key=lambda wc: (-wc[1], wc[0]))[:top]]
    return "\n".join(out) + "\n"


def read(p):
    with open(p, encoding="utf-8", newline="") as f:
        return f.read()


def tally(*args, cwd=APP, stdin=""):
    env = dict(os.environ, PYTHONPATH=APP if cwd != APP else os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "tally", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


def out_ok(r, want):
    return r.returncode == 0 and r.stdout == want


# -- the command line, from /app and from elsewhere
check("default top 3", lambda: out_ok(tally(A), expect([read(A)])))
check(
    "--top 5, two files", lambda: out_ok(tally("--top", "5", A, B), expect([read(A), read(B)], 5))
)
check(
    "--ignore-case",
    lambda: out_ok(tally("--ignore-case", "--top", "4", A), expect([read(A)], 4, True)),
)
check(
    "--top 0 and stdin", lambda: out_ok(tally("--top", "0", "-", stdin=STDIN), expect([STDIN], 0))
)
check(
    "stdin with files",
    lambda: out_ok(tally(B, "-", "--top", "2", stdin=STDIN), expect([read(B), STDIN], 2)),
)
check(
    "from another directory", lambda: out_ok(tally("--top", "2", B, cwd=tmp), expect([read(B)], 2))
)
check(
    "--version",
    lambda: (lambda r: r.returncode == 0 and r.stdout.strip() == "tally 1.4.0")(
        tally("--version", cwd=tmp)
    ),
)


def unreadable():
    r = tally(A, os.path.join(tmp, "missing.txt"))
    return (
        r.returncode == 2
        and f"tally: error: cannot read {os.path.join(tmp, 'missing.txt')}" in r.stderr
    )


check("unreadable file", unreadable)
check(
    "negative --top",
    lambda: (lambda r: r.returncode == 2 and "tally: error:" in r.stderr)(tally("--top", "-1", A)),
)
check(
    "usage names tally",
    lambda: (lambda r: r.returncode == 2 and r.stderr.startswith("usage: tally"))(tally(cwd=tmp)),
)


# -- pyproject.toml
def pyproject():
    with open(os.path.join(APP, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def metadata_ok():
    proj = pyproject()["project"]
    sys.path.insert(0, APP)
    version = importlib.import_module("tally").__version__
    return (
        proj.get("name") == "tally"
        and proj.get("version") == version == "1.4.0"
        and not proj.get("dependencies")
    )


def build_ok():
    d = pyproject()
    bs = d.get("build-system", {})
    pkgs = d.get("tool", {}).get("setuptools", {}).get("packages")
    pkgs_ok = pkgs is None or (
        isinstance(pkgs, list)
        and "tally" in pkgs
        and all(os.path.isfile(os.path.join(APP, *p.split("."), "__init__.py")) for p in pkgs)
    )
    return (
        bs.get("build-backend") == "setuptools.build_meta"
        and any("setuptools" in r for r in bs.get("requires", []))
        and pkgs_ok
    )


def script_ok():
    target = pyproject()["project"]["scripts"]["tally"]
    mod, _, attr = target.partition(":")
    code = (
        "import sys, importlib\n"
        f"fn = importlib.import_module({mod!r})\n"
        f"for a in {attr!r}.split('.'): fn = getattr(fn, a)\n"
        f"sys.argv = ['tally', '--top', '4', {A!r}, {B!r}]\n"
        "sys.exit(fn())\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp,
        env=dict(os.environ, PYTHONPATH=APP),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return r.returncode == 0 and r.stdout == expect([read(A), read(B)], 4)


check("pyproject: name, version, no dependencies", metadata_ok)
check("pyproject: setuptools build, packages", build_ok)
check("pyproject: console script runs the CLI", script_ok)
print(round(sum(results) / len(results), 4))
