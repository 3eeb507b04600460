"""SWE-bench Pro's per-instance fields: its Dockerfiles as build steps, ``before_repo_set_cmd``,
``selected_test_files_to_run``, and ``requirements`` / ``interface`` for the prompt.

**Dockerfiles.** Pro ships, per instance, a ``base_dockerfile`` (``FROM python:3.9-slim``,
``apt-get install``, ``git clone`` of the repository, ``git checkout`` of an environment
commit) and an ``instance_dockerfile`` (``FROM base_<repo>...``, ``ENV``, heredoc scripts that
reset the repository and ``pip install`` its requirements). :func:`pro_image` reads both into
the layered builder's stages (``{"name", "base", "steps"}``, steps ``run`` / ``env`` / ``arg``
/ ``workdir`` / ``user``, see ``dockyard.sandbox.layers.spec`` on the builder's branch) plus one
step of its own, ``{"repository": {"dest", "commit"}}``: the instance's repository copied into
the image where the Dockerfile cloned it (the task supplies the repository; nothing is cloned).

=================================================  =============================================
``FROM python:X.Y[-slim][-<release>]``             ``python:<release>`` (the release shipping
                                                   X.Y, or the nearest, noted)
``FROM ubuntu:20.04|22.04|24.04``, ``debian:<r>``  ``debian:<release>`` (Ubuntu: the Debian
                                                   release of its time, noted)
``FROM <registry mirror>/library/python:…``        the same image (the mirror noted)
``FROM base_…`` (instance_dockerfile)              ``stage:base``
``RUN git clone <the instance's repo> <dir>``      ``{"repository": …}`` (noted)
``RUN git checkout <sha>``                         the commit of that repository step
``RUN`` of a script that only resets the           dropped: the sandbox's workspace is the
repository (``git reset/clean/checkout``)          repository at base_commit
other ``RUN`` / ``ENV`` / ``ARG`` / ``WORKDIR``     the same step
``ENTRYPOINT`` / ``CMD`` / ``LABEL`` / ``EXPOSE``  ignored (noted)
=================================================  =============================================

Refused at load, naming the Dockerfile, the line and the reason (:class:`StepRefused`): bases no
Debian root approximates (``golang:…``, ``node:…``, ``alpine``), ``RUN`` steps that download from
hosts outside the package registries (``deb.nodesource.com``, ``dl.google.com``, another git
repository, ``git submodule update``), ``COPY`` / ``ADD`` (Pro publishes no build context).

**before_repo_set_cmd** (:func:`before_repo_set`): Pro's harness runs its *last* line after the
patch; it is ``git checkout <fix commit> -- <test files>``, restoring the held-out tests — which
the sandbox does with the instance's ``test_patch`` (checked: every named file is in it). Its
other lines reset the repository to base_commit, which the sandbox's workspace already is. A
line of another form runs in the repository stage (the task's ``setup_command``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.swe.commands import StepRefused, simple_commands
from dockyard.envs.swe.records import SweInstance
from dockyard.envs.swe.tables import nearest_release

REGISTRY_HOSTS = {"pypi.org", "files.pythonhosted.org", "deb.debian.org", "security.debian.org",
                  "registry.npmjs.org", "127.0.0.1", "localhost"}  # fmt: skip
"""Hosts a build step may reach (the package registries, and the build's own loopback)."""

UBUNTU_RELEASES = {"18.04": "bullseye", "20.04": "bullseye", "22.04": "bookworm", "24.04": "trixie"}
DEBIAN_RELEASES = {"11": "bullseye", "12": "bookworm", "13": "trixie",
                   "bullseye": "bullseye", "bookworm": "bookworm", "trixie": "trixie"}  # fmt: skip
_URL = re.compile(r"\b(?:https?|ftp|git)://([A-Za-z0-9.\-]+)")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_MIRROR = re.compile(r"^(?:[\w.\-]+(?::\d+)?/)+?(?:docker-hub/)?library/")
_IGNORED = {"ENTRYPOINT", "CMD", "LABEL", "EXPOSE", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK"}
_GIT_POSITION = re.compile(r"\s*(?:cd\s+\S+|git\s+(?:reset|clean|checkout)\b.*|#.*|)\s*")


@dataclass
class ProImage:
    """The builder's stages of an instance's two Dockerfiles (module docstring)."""

    stages: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def spec(self) -> dict[str, Any]:
        return {"stages": self.stages, "notes": self.notes}


def dockerfile_lines(text: str) -> list[tuple[int, str, str]]:
    """``(line, INSTRUCTION, rest)``: continuations joined, comments dropped, a heredoc's
    body and delimiter kept in the rest (so a RUN's shell text stays whole)."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, buf = i + 1, ""
        while i < len(lines):
            raw = lines[i].rstrip()
            i += 1
            if not buf and (not raw.strip() or raw.lstrip().startswith("#")):
                start = i + 1
                continue
            if raw.endswith("\\"):
                buf += raw[:-1] + " "
                continue
            buf += raw
            break
        if not buf.strip():
            continue
        for _, delim in _HEREDOC.findall(buf):
            body = []
            while i < len(lines) and lines[i].strip() != delim:
                body.append(lines[i])
                i += 1
            i += 1
            buf += "\n" + "\n".join(body) + f"\n{delim}"
        op, _, rest = buf.strip().partition(" ")
        out.append((start, op.upper(), rest.strip()))
    return out


def map_base(image: str) -> tuple[str, str]:
    """``(builder base, note)`` of a ``FROM`` image. Raises StepRefused."""
    name = image.split("@", 1)[0]
    note = ""
    if _MIRROR.match(name):
        note = f"{image}: a registry mirror of Docker Hub's library image"
        name = _MIRROR.sub("", name)
    repo, _, tag = name.partition(":")
    if repo == "python":
        ver = re.match(r"\d+\.\d+", tag or "")
        rel = next((r for r in DEBIAN_RELEASES.values() if r in tag), None)
        release, why = nearest_release(ver.group(0) if ver else None)
        return f"python:{rel or release}", "; ".join(x for x in (note, why) if x)
    if repo in ("ubuntu", "debian"):
        table = UBUNTU_RELEASES if repo == "ubuntu" else DEBIAN_RELEASES
        key = next((k for k in table if tag.startswith(k)), None)
        if key is not None:
            approx = f"{image} -> debian:{table[key]}" if repo == "ubuntu" else ""
            return f"debian:{table[key]}", "; ".join(x for x in (note, approx) if x)
    raise StepRefused(
        f"FROM {image}: no Debian root approximates it (its toolchain is not a package of a "
        "Debian release the sandbox builds)"
    )


def _clone_of(words: list[str], repo: str) -> str | None:
    """The destination of ``git clone <the instance's repo> [dir]``, else None."""
    if words[:2] != ["git", "clone"]:
        return None
    args = [w for w in words[2:] if not w.startswith("-")]
    if not args or not re.search(rf"github\.com[:/]{re.escape(repo)}(?:\.git)?/?$", args[0]):
        return None
    return args[1] if len(args) > 1 else repo.split("/")[-1]


class _Reader:
    def __init__(self, inst: SweInstance) -> None:
        self.inst = inst
        self.out = ProImage()
        self.workdir = "/"
        self.dropped_scripts: set[str] = set()

    def dockerfile(self, text: str, which: str) -> None:
        steps: list[dict[str, Any]] = []
        stage: dict[str, Any] | None = None
        for line, op, rest in dockerfile_lines(text):
            where = f"{self.inst.instance_id}: {which} line {line}"
            try:
                if op == "FROM":
                    stage = self.from_(rest, which)
                    steps = stage["steps"]
                    continue
                if stage is None:
                    raise StepRefused(f"{op} before FROM")
                self.instruction(op, rest, steps)
            except StepRefused as e:
                raise StepRefused(f"{where}: {e}") from e
            except ValueError as e:  # shlex: unbalanced quotes
                raise StepRefused(f"{where}: {op} {rest[:80]!r} is not shell words ({e})") from e

    def from_(self, rest: str, which: str) -> dict[str, Any]:
        image = rest.split()[0]
        if which == "instance_dockerfile" and re.match(r"(?:.*:)?base_", image):
            stage = {"name": None, "base": "stage:base", "steps": []}
        else:
            base, note = map_base(image)
            if note:
                self.out.notes.append(f"{which}: {note}")
            stage = {"name": "base", "base": base, "steps": []}
        self.out.stages.append(stage)
        return stage

    def instruction(self, op: str, rest: str, steps: list[dict[str, Any]]) -> None:
        if op in _IGNORED:
            self.out.notes.append(f"{op} ignored (the agent gets a shell)")
        elif op == "WORKDIR":
            self.workdir = rest
            steps.append({"workdir": rest})
        elif op in ("ENV", "ARG"):
            toks = shlex.split(rest)
            pairs = (
                dict(t.split("=", 1) for t in toks if "=" in t)
                if "=" in toks[0]
                else {toks[0]: " ".join(toks[1:])}
            )
            steps.append({op.lower(): pairs})
        elif op == "USER":
            steps.append({"user": rest})
        elif op == "RUN":
            self.run(rest, steps)
        else:
            raise StepRefused(f"{op}: not supported (Pro publishes no build context)")

    def run(self, text: str, steps: list[dict[str, Any]]) -> None:
        cmds = simple_commands(text.split("\n", 1)[0])
        if len(cmds) == 1 and (dest := _clone_of(cmds[0], self.inst.repo)) is not None:
            path = dest if dest.startswith("/") else f"{self.workdir.rstrip('/')}/{dest}"
            steps.append({"repository": {"dest": path.replace("/.", "") or "/", "commit": None}})
            self.out.notes.append("git clone of the repository -> the task's repository")
            return
        if len(cmds) == 1 and cmds[0][:2] == ["git", "checkout"] and steps:
            repo_steps = [s for s in steps if "repository" in s]
            if repo_steps and len(cmds[0]) == 3:
                repo_steps[-1]["repository"]["commit"] = cmds[0][2]
                return
        if self.positions_repository(text, cmds):
            return
        hosts = sorted(set(_URL.findall(text)) - REGISTRY_HOSTS)
        if hosts:
            raise StepRefused(
                f"RUN downloads from {', '.join(hosts)}, outside the package registries"
            )
        if any(c[:3] == ["git", "submodule", "update"] for c in cmds):
            raise StepRefused("RUN git submodule update fetches from a git host")
        steps.append({"run": text})

    def positions_repository(self, text: str, cmds: list[list[str]]) -> bool:
        """A heredoc script that only resets the repository (and the RUNs that make it
        executable and run it): dropped, noted."""
        first = text.split("\n", 1)[0]
        m = re.match(r"cat\s+<<-?\s*['\"]?\w+['\"]?\s*>\s*(\S+)\s*$", first)
        if m and all(
            _GIT_POSITION.fullmatch(x)
            for x in text.split("\n")[1:-1]
            if x.strip() and not x.startswith("#!")
        ):
            self.dropped_scripts.add(m.group(1))
            self.out.notes.append(
                f"{m.group(1)} resets the repository: the workspace is at base_commit"
            )
            return True
        words = [w for c in cmds for w in c]
        return bool(words) and any(s in words for s in self.dropped_scripts) and set(words) <= {
            "chmod", "+x", "bash", "sh", *self.dropped_scripts
        }  # fmt: skip


def pro_image(inst: SweInstance) -> ProImage | None:
    """The builder's stages of ``inst``'s ``base_dockerfile`` + ``instance_dockerfile`` (None
    when it has neither). Raises StepRefused naming the Dockerfile and line."""
    base, instance = inst.pro.get("base_dockerfile"), inst.pro.get("instance_dockerfile")
    if not base and not instance:
        return None
    r = _Reader(inst)
    if base:
        r.dockerfile(str(base), "base_dockerfile")
    if instance:
        r.dockerfile(str(instance), "instance_dockerfile")
    return r.out


def before_repo_set(inst: SweInstance) -> list[str]:
    """The lines of ``before_repo_set_cmd`` that still have to run in the repository stage
    (module docstring). Raises StepRefused naming the line it cannot honour."""
    text = str(inst.pro.get("before_repo_set_cmd") or "")
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    touched = set(re.findall(r"^diff --git a/\S+ b/(\S+)", inst.test_patch, re.M))
    keep = []
    for n, line in enumerate(lines, 1):
        words = shlex.split(line)
        if words[:2] == ["git", "checkout"] and "--" in words:
            files = words[words.index("--") + 1 :]
            missing = [f for f in files if f not in touched]
            if missing:
                raise StepRefused(
                    f"{inst.instance_id}: before_repo_set_cmd line {n}: restores {missing} from "
                    f"{words[2][:12]}, which the test_patch does not hold (the sandbox's repository "
                    "has no history past base_commit)"
                )
        elif words[:2] not in (["git", "reset"], ["git", "clean"], ["git", "checkout"]):
            keep.append(line)
    return keep


def prompt_sections(task: dict[str, Any]) -> str:
    """Pro's ``requirements`` and ``interface`` as prompt text ('' when absent)."""
    parts = []
    for key, title in (("requirements", "Requirements"), ("interface", "Interface")):
        v = task.get(key)
        if isinstance(v, str) and v.strip():
            parts.append(f"<{key}>\n{title}:\n{v.strip()}\n</{key}>")
    return "\n\n".join(parts)


def selected_tests(inst: SweInstance) -> list[str]:
    """``selected_test_files_to_run`` (the files Pro's run script runs), [] when absent.
    Raises StepRefused when a pytest id of FAIL_TO_PASS / PASS_TO_PASS lies in none of them
    (Pro's harness would never run it: the instance could not be resolved)."""
    files = [str(f) for f in inst.pro.get("selected_test_files_to_run") or []]
    if not files:
        return []
    for tid in [*inst.fail_to_pass, *inst.pass_to_pass]:
        if "::" in tid and tid.split("::", 1)[0] not in files:
            raise StepRefused(
                f"{inst.instance_id}: test {tid!r} is in none of selected_test_files_to_run "
                f"{files}: Pro's harness never runs it"
            )
    return files


def check_pro(inst: SweInstance) -> None:
    """Everything about a Pro instance that can be refused at load (Dockerfiles, the
    before_repo_set_cmd, the selected test files). Raises StepRefused naming the line."""
    pro_image(inst)
    before_repo_set(inst)
    selected_tests(inst)
