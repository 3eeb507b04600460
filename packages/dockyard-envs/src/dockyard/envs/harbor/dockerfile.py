"""A Harbor task's ``environment/Dockerfile``, read into a sandbox environment spec (no Docker).

The common subset maps onto ``dockyard.sandbox.envspec.EnvSpec`` ("a base + a list of steps",
provisioned once by the sandbox service, cached by hash, mounted read-only):

| instruction | becomes |
|---|---|
| ``FROM`` debian / ubuntu / python / buildpack-deps (Docker Hub, any tag), Terminal-Bench's ``ghcr.io/laude-institute/t-bench/*`` bases | the sandbox's own system (``base = "system"``); the tag is not matched |
| ``WORKDIR /app`` (one top-level directory) | where the starting tree appears (also at /workspace) |
| ``COPY`` / ``ADD`` of build-context files into the workdir | a ``files`` step (a tarball) |
| ``RUN apt-get install -y P…`` | ``host_packages``: those the sandbox host lacks are fetched from its apt mirrors and unpacked (no maintainer scripts) into the environment's /opt/env/root at provisioning time (needs the service's ``--allow-network``; ``dockyard.sandbox.debs``) |
| ``RUN apt-get update`` / ``clean`` / ``rm -rf /var/lib/apt/lists/*`` | dropped |
| ``RUN pip install …`` / ``python -m pip install …`` | a ``run`` step (pip installs into the environment's /opt/env/site) |
| other ``RUN`` | a ``run`` step, in the workdir |
| ``ENV`` / ``ARG`` with a default | variables (``$PATH`` in ``ENV PATH`` keeps the sandbox's path) |
| ``CMD``, ``ENTRYPOINT``, ``LABEL``, ``MAINTAINER``, ``VOLUME``, ``USER root`` | ignored (the agent gets a shell) |

Anything else is refused with the file, the line and the reason: a second ``FROM``
(multi-stage), another image, ``COPY --from``, ``ADD`` of a URL or an archive, ``USER`` other
than root, ``EXPOSE`` / ``HEALTHCHECK`` (services), ``ONBUILD``, ``SHELL``, ``RUN --mount``,
other package managers (apk, yum, dnf), destinations outside the workdir.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox.envspec import check_workdir

_BASES = re.compile(
    r"(?:(?:docker\.io/)?(?:library/)?(?:debian|ubuntu|python|buildpack-deps)"
    r"|ghcr\.io/laude-institute/t-bench/(?:ubuntu|python|debian)[\w.\-]*)"
    r"(?::[\w.\-]+)?(?:@sha256:[0-9a-f]{64})?"
)
_IGNORED = {"CMD", "ENTRYPOINT", "LABEL", "MAINTAINER", "VOLUME", "STOPSIGNAL"}
_REFUSED = {
    "EXPOSE": "a service port: dockyard sandboxes run no background services",
    "HEALTHCHECK": "a service health check: dockyard sandboxes run no background services",
    "ONBUILD": "ONBUILD triggers are not supported",
    "SHELL": "a non-default shell for RUN is not supported (RUN uses /bin/sh -c)",
}
_APT_NOOP = re.compile(
    r"(?:apt-get|apt)\s+(?:update|clean|autoclean|autoremove)(?:\s+-\S+)*|"
    r"rm\s+-(?:rf|fr)\s+/var/lib/apt/lists/?\*?|true"
)
_APT_INSTALL = re.compile(
    r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:apt-get|apt)((?:\s+-[\w-]+)*)\s+install\s+(.*)", re.S
)
_OTHER_PM = re.compile(r"(?:^|[\s;&|(])(?:apk|yum|dnf|zypper|pacman|apt-get|apt|dpkg)\s")
_PYPIP = re.compile(r"\bpython3?(?:\.\d+)?\s+-m\s+pip\b")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class HarborFormatError(ValueError):
    """A task directory this loader cannot run; the message names the file and line."""


@dataclass
class ParsedEnvironment:
    """The EnvSpec fields (``dockyard.sandbox.envspec.EnvSpec``) and notes for humans."""

    workdir: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    host_packages: list[str] = field(default_factory=list)
    steps: list[dict[str, str]] = field(default_factory=list)
    network: bool = False
    notes: list[str] = field(default_factory=list)

    def spec(self, timeout_s: float = 900.0) -> dict:
        return {
            "workdir": self.workdir, "env": self.env, "host_packages": self.host_packages,
            "steps": self.steps, "timeout_s": timeout_s, "network": self.network,
        }  # fmt: skip


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, instruction text) with continuations joined."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # comments inside a continued instruction
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def _expand(value: str, scope: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return "${PATH}" if name == "PATH" else scope.get(name, "")

    return _VAR.sub(sub, value)


def _kv_pairs(rest: str) -> list[tuple[str, str]]:
    """``K=V K2="v 2"`` or the legacy ``K V`` form."""
    toks = shlex.split(rest, posix=True)
    if toks and "=" not in toks[0]:
        return [(toks[0], " ".join(toks[1:]))]
    return [tuple(t.split("=", 1)) for t in toks if "=" in t]  # type: ignore[misc]


class _Parser:
    def __init__(self, dockerfile: Path, context: Path) -> None:
        self.path, self.context = dockerfile, context
        self.out = ParsedEnvironment()
        self.scope: dict[str, str] = {}
        self.args: dict[str, str] = {}  # ARG values: expanded in RUN text (they are no ENV)
        self.cwd: str | None = None
        self.seen_from = False
        self.line = 0

    def fail(self, reason: str) -> HarborFormatError:
        return HarborFormatError(f"{self.path}:{self.line}: {reason}")

    def parse(self) -> ParsedEnvironment:
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise HarborFormatError(f"{self.path}: cannot read the Dockerfile ({e})") from e
        for self.line, instr in _logical_lines(text):
            word, _, rest = instr.partition(" ")
            op = word.upper()
            rest = rest.strip()
            if op != "FROM" and not self.seen_from and op != "ARG":
                raise self.fail(f"{op} before FROM")
            handler = getattr(self, f"op_{op.lower()}", None)
            if handler is not None:
                handler(rest)
            elif op in _IGNORED:
                self.out.notes.append(f"line {self.line}: {op} ignored (the agent gets a shell)")
            elif op in _REFUSED:
                raise self.fail(f"{op}: {_REFUSED[op]}")
            else:
                raise self.fail(f"unknown or unsupported instruction {word!r}")
        if not self.seen_from:
            raise HarborFormatError(f"{self.path}: no FROM line")
        if self.cwd is not None:
            self.out.workdir = self.cwd
        return self.out

    # -- instructions -----------------------------------------------------------------------
    def op_from(self, rest: str) -> None:
        if self.seen_from:
            raise self.fail("a second FROM (multi-stage build): only single-stage files run here")
        toks = [t for t in rest.split() if not t.startswith("--platform")]
        image = _expand(toks[0], self.scope) if toks else ""
        if not _BASES.fullmatch(image):
            raise self.fail(
                f"FROM {image!r}: only Debian, Ubuntu, python and buildpack-deps bases (and "
                "Terminal-Bench's t-bench bases) map onto the sandbox's system"
            )
        self.seen_from = True
        self.out.notes.append(f"line {self.line}: FROM {image} -> the sandbox's system")

    def op_arg(self, rest: str) -> None:
        name, eq, default = rest.partition("=")
        if not eq:
            self.scope.setdefault(name.strip(), "")
            return
        self.scope[name.strip()] = _expand(default.strip().strip('"'), self.scope)
        self.args[name.strip()] = self.scope[name.strip()]

    def op_env(self, rest: str) -> None:
        for k, v in _kv_pairs(rest):
            value = _expand(v, self.scope)
            if k == "PATH" and "${PATH}" not in value:
                raise self.fail(
                    "ENV PATH without $PATH would hide the sandbox's tools: append $PATH"
                )
            self.scope[k] = value
            self.out.env[k] = value

    def op_workdir(self, rest: str) -> None:
        path = _expand(rest.strip().strip('"'), self.scope)
        if not path.startswith("/"):
            path = os.path.normpath(f"{self.cwd or '/'}/{path}")
        path = path.rstrip("/") or "/"
        if self.cwd is not None and path != self.cwd:
            raise self.fail(
                f"WORKDIR {path}: a second, different WORKDIR (after {self.cwd}) is not supported"
            )
        if path == "/workspace":
            self.cwd = path
            return
        if path.count("/") != 1 or path in ("/",):
            raise self.fail(f"WORKDIR {path}: only a top-level directory (like /app) is supported")
        try:
            self.cwd = check_workdir(path)
        except ValueError as e:
            raise self.fail(str(e)) from e

    def op_user(self, rest: str) -> None:
        if rest.split(":")[0] not in ("root", "0"):
            raise self.fail(
                f"USER {rest}: tasks run as one unprivileged user; other users are not supported"
            )

    def op_run(self, rest: str) -> None:
        if rest.startswith("--"):
            raise self.fail(
                f"RUN {rest.split()[0]}: RUN flags (--mount, --network) are not supported"
            )
        if rest.startswith("["):
            try:
                rest = shlex.join(json.loads(rest))
            except (ValueError, TypeError) as e:
                raise self.fail(f"RUN: exec form is not a JSON list of strings ({e})") from e
        args = self.args

        def sub(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(2)
            return args[name] if name in args else m.group(0)

        rest = _VAR.sub(sub, rest)
        kept: list[str] = []
        for seg in re.split(r"\s*&&\s*", rest):
            s = seg.strip()
            if not s or _APT_NOOP.fullmatch(s):
                continue
            m = _APT_INSTALL.fullmatch(s)
            if m:
                self._apt(m.group(1) + " " + m.group(2))
                continue
            if _OTHER_PM.search(" " + s):
                raise self.fail(
                    f"RUN {s[:80]!r}: system package managers do not run in the sandbox (only "
                    "`apt-get install [-y...] P...` is accepted, as its own `&&` segment)"
                )
            s = _PYPIP.sub("pip", s)
            if re.search(r"\bpip3?\s+install\b", s) and "--no-index" not in s:
                self.out.network = True
            kept.append(s)
        if kept:
            self.out.steps.append({"run": " && ".join(kept)})

    def _apt(self, args: str) -> None:
        """Package names of ``apt-get install``'s arguments (a ``=version`` is not kept: the
        host's mirrors give their candidate); ``-o X`` is skipped (dpkg never runs here)."""
        toks = shlex.split(args)
        for i, tok in enumerate(toks):
            if tok.startswith("-") or (i and toks[i - 1] == "-o"):
                if tok in ("-t", "--target-release") or tok.startswith("--target-release="):
                    raise self.fail(f"apt-get install {tok}: target releases are not supported")
                continue
            name = tok.split("=", 1)[0]
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.\-]*", name):
                raise self.fail(f"apt-get install {tok!r}: not a plain package name")
            if name not in self.out.host_packages:
                self.out.host_packages.append(name)

    def op_copy(self, rest: str, what: str = "COPY") -> None:
        toks = shlex.split(rest) if not rest.startswith("[") else json.loads(rest)
        flags = [t for t in toks if t.startswith("--")]
        for f in flags:
            if f.startswith("--from"):
                raise self.fail(f"{what} --from: multi-stage builds are not supported")
            if not f.startswith(("--chown", "--chmod", "--link")):
                raise self.fail(f"{what} {f}: unsupported flag")
        args = [t for t in toks if not t.startswith("--")]
        if len(args) < 2:
            raise self.fail(f"{what} needs a source and a destination")
        *srcs, dest = args
        self.op_copy_files([_expand(s, self.scope) for s in srcs], _expand(dest, self.scope), what)

    def op_add(self, rest: str) -> None:
        for t in shlex.split(rest):
            if re.match(r"[a-z]+://", t) or t.startswith("git@"):
                raise self.fail(f"ADD {t}: downloading at build time is not supported (no network)")
            if re.search(r"\.(tar|tgz|tar\.\w+)$", t) and t != shlex.split(rest)[-1]:
                raise self.fail(
                    f"ADD {t}: ADD's archive extraction is not supported; use COPY + RUN tar"
                )
        self.op_copy(rest, "ADD")

    def op_copy_files(self, srcs: list[str], dest: str, what: str) -> None:
        workdir = self.cwd or "/workspace"
        target = dest if dest.startswith("/") else f"{workdir}/{dest}"
        is_dir_dest = dest.endswith("/") or len(srcs) > 1 or dest in (".", "./")
        target = os.path.normpath(target)
        if target != workdir and not target.startswith(workdir + "/"):
            raise self.fail(
                f"{what} to {dest}: only destinations inside the workdir ({workdir}) are supported"
            )
        rel_dest = os.path.relpath(target, workdir)
        members: dict[str, bytes] = {}
        ctx = self.context.resolve()
        for src in srcs:
            matches = sorted(ctx.glob(src)) if any(c in src for c in "*?[") else [ctx / src]
            for m in matches:
                real = m.resolve()
                if real != ctx and ctx not in real.parents:
                    raise self.fail(f"{what} {src}: leaves the build context")
                if not m.exists():
                    raise self.fail(f"{what} {src}: no such file in {self.context}")
                if m.is_dir():
                    for p in sorted(m.rglob("*")):
                        if p.is_file():
                            rel = os.path.normpath(os.path.join(rel_dest, str(p.relative_to(m))))
                            members[rel] = p.read_bytes()
                else:
                    name = os.path.join(rel_dest, m.name) if is_dir_dest else rel_dest
                    members[os.path.normpath(name)] = m.read_bytes()
        if any(k in (".", "") or k.startswith("..") for k in members):
            raise self.fail(f"{what}: a destination that is the workdir itself must be a directory")
        self.out.steps.append({"files": _tarball(members)})


def _tarball(members: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if data.startswith(b"#!") or name.endswith(".sh") else 0o644
            tf.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def parse_dockerfile(dockerfile: Path, context: Path | None = None) -> ParsedEnvironment:
    """Read ``dockerfile`` (build context: its folder) into a :class:`ParsedEnvironment`;
    :class:`HarborFormatError` names the line and the reason for anything outside the subset."""
    return _Parser(dockerfile, context or dockerfile.parent).parse()
