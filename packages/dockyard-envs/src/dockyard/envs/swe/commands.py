"""Shell lines of SWE-bench specs, read with shell rules into what each simple command does.

A spec line (``apt-get update && apt-get install -y locales``) is split at ``&&``, ``;``,
``||``, ``|`` into simple commands (:func:`simple_commands`); :func:`classify` names the kind of
each one (``apt``, ``pip``, ``conda``, ``repo_install``, ``compiled``, ``repo_edit`` ...) with
the details :mod:`dockyard.envs.swe.plan` turns into build steps.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from dockyard.envs.swe.tables import COMPILED_REPOS, DOWNLOADS_TO_DEBIAN

_SEPARATORS = {"&&", ";", "||", "|", "&", "(", ")", "\n"}
_APT_FLAGS = re.compile(r"-[a-zA-Z]+|--[a-z][a-z-]*(=\S+)?")
_APT_PKG = re.compile(r"[a-z0-9][a-z0-9+.\-]{0,127}(=\S+)?")
_URL = re.compile(r"\b(?:https?|ftp)://([A-Za-z0-9.\-]+)")
_PY = re.compile(r"python[0-9.]*")
_EDITORS = {"sed", "grep", "echo", "printf", "cat", "head", "tail", "touch", "mkdir", "rm", "cp",
            "mv", "true", "chmod", "cd"}  # fmt: skip
_BUILD_FLAGS = ("--no-build-isolation", "--no-use-pep517")
OTHER_TOOLS = {
    "npm": "js", "npx": "js", "yarn": "js", "pnpm": "js", "node": "js", "grunt": "js",
    "go": "go", "cargo": "rs", "mvn": "java", "./mvnw": "java", "ant": "java", "gradle": "java",
    "composer": "php", "bundle": "rb", "gem": "rb", "make": "c", "cmake": "c", "./configure": "c",
    "autoreconf": "c", "gcc": "c", "cc": "c", "g++": "c",
}  # fmt: skip
"""Build tools of other languages and the language they belong to."""


class StepRefused(ValueError):
    """A spec step that cannot run here; the message names the step and why."""


@contextlib.contextmanager
def naming(where: str) -> Iterator[None]:
    """A StepRefused raised inside is re-raised with ``where`` (the step and its text) first."""
    try:
        yield
    except StepRefused as e:
        raise StepRefused(f"{where}: {e}") from e


@dataclass
class Command:
    """One simple command of a spec line and what it does (``kind``), with its details."""

    words: list[str]
    kind: str
    args: list[str] = field(default_factory=list)  # packages, pip arguments, extras...
    env: dict[str, str] = field(default_factory=dict)


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (its words, quotes removed), split at ``&&``,
    ``;``, ``||``, ``|``. Raises StepRefused for text a shell could not parse."""
    line = re.sub(r"\$\([^()]*\)", "SUBST", line)  # $(nproc): one word for classifying
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    try:
        for tok in lex:
            if tok in _SEPARATORS or set(tok) <= set("&;|()"):
                out.append([])
            else:
                out[-1].append(tok)
    except ValueError as e:
        raise StepRefused(f"not a shell command ({e})") from e
    return [c for c in out if c]


def _strip_assignments(words: list[str]) -> tuple[list[str], dict[str, str]]:
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        k, v = words[0].split("=", 1)
        env[k] = v
        words = words[1:]
    return words, env


def pip_args(words: list[str]) -> list[str] | None:
    """The arguments after ``install`` of a pip command, or None if ``words`` is not one."""
    if words[:1] in (["pip"], ["pip3"]):
        rest = words[1:]
    elif len(words) >= 3 and _PY.fullmatch(words[0]) and words[1:3] == ["-m", "pip"]:
        rest = words[3:]
    else:
        return None
    return rest[1:] if rest[:1] == ["install"] else None


def _is_self(arg: str) -> bool:
    return arg in (".", "./") or arg.startswith((".[", "./["))


def _extras(arg: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", arg)
    return [e.strip() for e in m.group(1).split(",") if e.strip()] if m else []


def _classify_pip(words: list[str], pip: list[str], repo: str) -> Command:
    reqs = [pip[i + 1] for i, a in enumerate(pip[:-1]) if a in ("-r", "--requirement")]
    reqs += [a[2:] for a in pip if a.startswith("-r") and len(a) > 2]
    targets = [a for a in pip if not a.startswith("-") and a not in reqs]
    selves = [a for a in targets if _is_self(a)]
    if reqs:
        return Command(words, "requirements", reqs)
    if not selves:
        return Command(words, "pip", pip)
    if len(targets) > 1:
        raise StepRefused("installs the repository together with other packages")
    compiled = any(f in pip for f in _BUILD_FLAGS) or repo in COMPILED_REPOS
    return Command(words, "compiled" if compiled else "repo_install", _extras(selves[0]))


def classify(words: list[str], repo: str) -> Command:
    """What the simple command ``words`` does (see the module docstring). Raises StepRefused
    for a command no route translates, naming why."""
    words, env = _strip_assignments(words)
    if not words:
        return Command([], "assign", env=env)
    first = words[0]
    sub = [w for w in words[1:] if not w.startswith("-")][:1]
    if first == "export":
        pairs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        return Command(words, "export", env=pairs)
    if first in ("apt-get", "apt") and sub in (["update"], ["clean"], ["autoclean"], ["upgrade"]):
        return Command(words, "noop", sub)
    if first in ("apt-get", "apt") and sub == ["install"]:
        pkgs = [w for w in words[1:] if not _APT_FLAGS.fullmatch(w) and w != "install"]
        if not all(_APT_PKG.fullmatch(p) for p in pkgs):
            raise StepRefused("an apt-get install of unknown form")
        return Command(words, "apt", [p.split("=")[0] for p in pkgs], env)
    if first in ("conda", "mamba", "micromamba"):
        return _classify_conda(words)
    if first in ("source", ".") and not (sub and sub[0].endswith("/activate")):
        raise StepRefused(f"sources a script ({' '.join(words[1:2])}) no route translates")
    if first in ("source", ".") or words[:3] == ["python", "-m", "venv"]:
        return Command(words, "noop", ["activate"])
    if first == "git" and sub[:1] in (["clone"], ["submodule"], ["fetch"], ["pull"]):
        raise StepRefused("fetches from a git host, outside the package registries")
    if first == "locale-gen":
        return Command(words, "locale", words[1:] or ["en_US.UTF-8"])
    pip = pip_args(words)
    if pip is not None:
        return _classify_pip(words, pip, repo)
    if len(words) >= 3 and _PY.fullmatch(first) and words[1] == "setup.py":
        if words[2] in ("develop", "install", "build", "build_ext"):
            return Command(words, "compiled", [])
        raise StepRefused(f"runs setup.py {words[2]} on the repository")
    if first in ("wget", "curl"):
        hosts = _URL.findall(" ".join(words))
        raise StepRefused(f"downloads from {', '.join(hosts) or 'the network'}")
    if first in OTHER_TOOLS:
        return Command(words, "other", [OTHER_TOOLS[first]])
    if first in _EDITORS or first == "{":
        absolute = [w for w in words[1:] if w.startswith("/") and not w.startswith("/dev/")]
        if absolute:
            return Command(words, "system_edit", absolute)
        return Command(words, "repo_edit")
    raise StepRefused(f"{first!r} is neither pip, apt, conda nor an edit of the repository")


def _classify_conda(words: list[str]) -> Command:
    sub = [w for w in words[1:] if not w.startswith("-")]
    if sub[:1] in (["activate"], ["deactivate"]):
        return Command(words, "noop", ["activate"])
    if sub[:1] in (["install"], ["create"]):
        skip_next = {"-n", "--name", "-c", "--channel", "-p", "--prefix"}
        pkgs, i, rest = [], 0, words[2:]
        while i < len(rest):
            if rest[i] in skip_next:
                i += 2
                continue
            if not rest[i].startswith("-"):
                pkgs.append(rest[i])
            i += 1
        return Command(words, "conda", pkgs)
    raise StepRefused(f"conda {' '.join(sub[:1])} has no pip or Debian equivalent")


def download_key(line: str) -> str | None:
    """The :data:`~dockyard.envs.swe.tables.DOWNLOADS_TO_DEBIAN` entry a line belongs to."""
    low = line.lower()
    return next((k for k in DOWNLOADS_TO_DEBIAN if k in low), None)
