"""A Harbor task's ``environment/Dockerfile`` read into a layered image spec (built as Docker would).

The result is a ``dockyard.sandbox.layers.spec.ImageSpec`` (dict form): the sandbox builds each
``RUN`` / ``COPY`` / ``WORKDIR`` as a copy-on-write layer over a Debian root, as root of a user
namespace, so ``apt-get install``, ``pip install``, ``mkdir -p /fonts``, files under ``/etc`` and
maintainer scripts land at their real paths.

| instruction | becomes |
|---|---|
| ``FROM image [AS name]`` | a stage over the Debian root ``bases.choose`` maps the image to (approximations noted); ``FROM <stage>`` continues an earlier stage |
| ``ARG`` (before / after ``FROM``) | substitution in ``FROM`` / a build variable of later ``RUN``s |
| ``ENV`` | persisted variables (``$VAR`` expanded as Docker does) |
| ``RUN`` (shell, exec or heredoc form) | a layer; ``SHELL`` changes the shell |
| ``COPY`` / ``ADD`` of build-context files (globs, directories, local tar archives ``ADD`` unpacks), ``COPY --from=<stage>`` | a layer with Docker's destination rules; ``--chown`` / ``--chmod`` kept |
| ``WORKDIR`` | a layer creating it; the last one is where the agent starts |
| ``USER`` | later ``RUN``s run as that user (the agent itself runs as an unprivileged user) |
| ``CMD``, ``ENTRYPOINT``, ``LABEL``, ``MAINTAINER``, ``VOLUME``, ``STOPSIGNAL``, ``EXPOSE``, ``HEALTHCHECK`` | ignored, noted (the agent gets a shell; nothing is started for it) |

Refused at load time, naming the file, the line and the reason: a base no Debian root
approximates, ``ADD`` of a URL, a ``RUN`` that downloads from a host outside the package
registries (:func:`registry_hosts`: extend with ``DOCKYARD_HARBOR_REGISTRIES``), ``RUN --mount`` and other RUN flags, ``ONBUILD``, ``COPY``
sources outside the build context, several sources to a destination without a trailing ``/``.
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
from fnmatch import fnmatch
from pathlib import Path

from dockyard.envs.harbor.bases import UnmappableBase, choose
from dockyard.envs.harbor.dockerfile import HarborFormatError
from dockyard.envs.harbor.syntax import Instruction, expand, instructions, kv_pairs, split_flags

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REGISTRY_HOSTS = (
    "deb.debian.org", "security.debian.org", "pypi.org", "files.pythonhosted.org",
    "registry.npmjs.org",
)  # fmt: skip
_IGNORED = {
    "CMD",
    "ENTRYPOINT",
    "LABEL",
    "MAINTAINER",
    "VOLUME",
    "STOPSIGNAL",
    "EXPOSE",
    "HEALTHCHECK",
}
_URL = re.compile(r"\b(?:https?|ftp)://([A-Za-z0-9.\-]+)")
_ARCHIVE = re.compile(r"\.(?:tar|tgz|tar\.gz|tar\.bz2|tbz2|tar\.xz|txz)$")
MAX_CONTEXT_BYTES = 64 << 20


@dataclass
class ParsedImage:
    """The ImageSpec (dict), the final WORKDIR and notes for humans (build log, reports)."""

    stages: list[dict] = field(default_factory=list)
    workdir: str = "/"
    notes: list[str] = field(default_factory=list)

    def spec(self, timeout_s: float = 900.0) -> dict:
        """``EnvSpec`` fields: the image, its WORKDIR (``/workspace`` when it has none)."""
        return {"image": {"stages": self.stages, "notes": self.notes[:256]}, "workdir": self.workdir if self.workdir != "/" else "/workspace",
                "timeout_s": timeout_s}  # fmt: skip


@dataclass
class _Stage:
    name: str | None
    env: dict[str, str]
    args: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    shell: list[str] = field(default_factory=lambda: ["/bin/sh", "-c"])
    steps: list[dict] = field(default_factory=list)


class _Reader:
    def __init__(self, path: Path, context: Path, registries: tuple[str, ...]) -> None:
        self.path, self.context = path, context.resolve()
        self.registries = {h.lower() for h in registries}
        self.out = ParsedImage()
        self.global_args: dict[str, str] = {}
        self.stage: _Stage | None = None
        self.done: dict[str, tuple[dict[str, str], str]] = {}  # stage name -> (ENV, WORKDIR)
        self.ins = Instruction(0, "")
        self.context_bytes = 0

    def fail(self, reason: str) -> HarborFormatError:
        return HarborFormatError(f"{self.path}:{self.ins.line}: {reason}")

    def note(self, text: str) -> None:
        self.out.notes.append(f"{self.path.name}:{self.ins.line}: {text}")

    def read(self) -> ParsedImage:
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise HarborFormatError(f"{self.path}: cannot read the Dockerfile ({e})") from e
        for self.ins in instructions(text):
            op = self.ins.op
            if op not in ("FROM", "ARG") and self.stage is None:
                raise self.fail(f"{op} before FROM")
            handler = getattr(self, f"op_{op.lower()}", None)
            if handler is not None:
                handler(self.ins.rest)
            elif op in _IGNORED:
                self.note(f"{op} ignored (the agent gets a shell; nothing is started for it)")
            elif op == "ONBUILD":
                raise self.fail("ONBUILD: triggers for a later build are not supported")
            else:
                raise self.fail(f"unknown instruction {op!r}")
        if self.stage is None:
            raise HarborFormatError(f"{self.path}: no FROM line")
        self._close_stage()
        return self.out

    def _close_stage(self) -> None:
        if self.stage is not None:
            st = self.stage
            self.out.stages[-1]["steps"] = st.steps
            self.out.workdir = st.workdir
            if st.name:  # for a later FROM <stage>
                self.done[st.name] = (dict(st.env), st.workdir)

    def scope(self) -> dict[str, str]:
        assert self.stage is not None
        return {**self.stage.args, **self.stage.env}

    # -- instructions -----------------------------------------------------------------------
    def op_from(self, rest: str) -> None:
        self._close_stage()
        flags, rest = split_flags(rest)
        if "platform" in flags:
            self.note(f"FROM --platform={flags['platform']} ignored (the host's architecture)")
        toks = rest.split()
        if not toks or (len(toks) not in (1, 3)) or (len(toks) == 3 and toks[1].upper() != "AS"):
            raise self.fail("FROM takes an image and optionally AS <name>")
        image = expand(toks[0], self.global_args)
        name = toks[2] if len(toks) == 3 else None
        parent = self.done.get(image.lower())
        if parent is not None:
            base, env = f"stage:{image.lower()}", dict(parent[0])
        else:
            try:
                got = choose(image)
            except UnmappableBase as e:
                raise self.fail(str(e)) from e
            base, env = got.base, {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
            if got.note:
                self.note(got.note)
        stage = {"name": name.lower() if name else None, "base": base, "steps": []}
        self.out.stages.append(stage)
        self.stage = _Stage(stage["name"], env)
        if parent is not None:
            self.stage.workdir = parent[1]

    def op_arg(self, rest: str) -> None:
        for tok in shlex.split(rest):
            k, eq, v = tok.partition("=")
            if self.stage is None:
                self.global_args[k] = (
                    expand(v, self.global_args) if eq else self.global_args.get(k, "")
                )
                continue
            val = expand(v, self.scope()) if eq else self.global_args.get(k, "")
            self.stage.args[k] = val
            self.stage.steps.append({"arg": {k: val}})

    def op_env(self, rest: str) -> None:
        assert self.stage is not None
        pairs = {k: expand(v, self.scope()) for k, v in kv_pairs(rest)}
        self.stage.env.update(pairs)
        self.stage.steps.append({"env": pairs})

    def op_workdir(self, rest: str) -> None:
        assert self.stage is not None
        path = expand(rest.strip().strip('"'), self.scope())
        path = os.path.normpath(os.path.join(self.stage.workdir, path))
        self.stage.workdir = path
        self.stage.steps.append({"workdir": path})

    def op_user(self, rest: str) -> None:
        assert self.stage is not None
        user = expand(rest.strip(), self.scope())
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,32}(?::[A-Za-z0-9_.\-]{1,32})?", user):
            raise self.fail(f"USER {user!r}: a user name or id (and group)")
        self.stage.steps.append({"user": user})
        if user.split(":")[0] not in ("root", "0"):
            self.note(
                f"USER {user}: later RUNs run as {user}; the agent runs as an unprivileged user"
            )

    def op_shell(self, rest: str) -> None:
        assert self.stage is not None
        try:
            shell = json.loads(rest)
        except ValueError as e:
            raise self.fail(f"SHELL takes a JSON list ({e})") from e
        if not (isinstance(shell, list) and shell and all(isinstance(s, str) for s in shell)):
            raise self.fail("SHELL takes a JSON list of strings")
        self.stage.shell = shell

    def op_run(self, rest: str) -> None:
        assert self.stage is not None
        flags, rest = split_flags(rest)
        for k, v in flags.items():
            if k == "network" and v in ("default", "host", "none"):
                continue
            raise self.fail(f"RUN --{k}: RUN flags (--mount, --security...) are not supported")
        if rest.startswith("["):
            try:
                argv = json.loads(rest)
            except ValueError as e:
                raise self.fail(f"RUN: exec form is not a JSON list of strings ({e})") from e
            script = shlex.join(argv)
        elif self.ins.heredocs and rest.lstrip().startswith("<<"):
            script = self.ins.heredocs[0][1]  # RUN <<EOF: the body is the script
        else:  # the shell reads any heredocs itself
            script = rest + "".join(f"\n{body}{delim}" for delim, body in self.ins.heredocs)
        for host in _URL.findall(script):
            if host.lower() not in self.registries:
                raise self.fail(
                    f"RUN downloads from {host}: builds reach only the package registries "
                    f"({', '.join(sorted(self.registries))}); vendor the file into the build context"
                )
        if self.stage.shell != ["/bin/sh", "-c"]:
            script = shlex.join([*self.stage.shell, script])
        self.stage.steps.append({"run": script})

    def op_copy(self, rest: str, what: str = "COPY") -> None:
        assert self.stage is not None
        flags, rest = split_flags(rest)
        for k in flags:
            if k not in ("from", "chown", "chmod", "link"):
                raise self.fail(f"{what} --{k}: not supported")
        if what == "ADD" and "from" in flags:
            raise self.fail("ADD --from: use COPY --from")
        if self.ins.heredocs and "<<" in rest:
            toks = rest.split()
            srcs = [("heredoc", body) for _, body in self.ins.heredocs]
            dest = toks[-1]
        else:
            toks = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            if len(toks) < 2:
                raise self.fail(f"{what} needs a source and a destination")
            srcs = [("path", expand(t, self.scope())) for t in toks[:-1]]
            dest = toks[-1]
        dest = expand(dest, self.scope())
        step: dict = {"dest": dest}
        for k in ("chown", "chmod"):
            if flags.get(k):
                step[k] = expand(flags[k], self.scope())
        if "from" in flags:
            src_stage = flags["from"].lower()
            if src_stage not in self.done and not (
                src_stage.isdigit() and int(src_stage) < len(self.out.stages) - 1
            ):
                raise self.fail(
                    f"{what} --from={flags['from']}: not an earlier stage (images cannot be pulled)"
                )
            paths = [os.path.normpath(os.path.join("/", p)) for _, p in srcs]
            step |= {
                "from_stage": src_stage,
                "paths": paths,
                "names": [os.path.basename(p) or "root" for p in paths],
            }
        else:
            step |= self._context_payload(srcs, what)
        if len(step["names"]) > 1 and not dest.endswith("/"):
            raise self.fail(
                f"{what} with several sources needs a destination ending in / (got {dest!r})"
            )
        self.stage.steps.append({"copy": step})

    def op_add(self, rest: str) -> None:
        for host in _URL.findall(rest):
            raise self.fail(
                f"ADD of a URL ({host}): builds reach only the package registries; vendor the file"
            )
        if re.search(r"(?:^|\s)git@", rest):
            raise self.fail("ADD of a git repository: not supported (vendor it into the context)")
        self.op_copy(rest, "ADD")

    # -- the build context ------------------------------------------------------------------
    def _context_payload(self, srcs: list[tuple[str, str]], what: str) -> dict:
        ignore = self._dockerignore()
        entries: list[tuple[str, Path | bytes]] = []
        for kind, src in srcs:
            if kind == "heredoc":
                entries.append((f"f{len(entries)}", src.encode()))
                continue
            pattern = src.lstrip("/")
            matches = (
                sorted(self.context.glob(pattern))
                if any(c in pattern for c in "*?[")
                else [self.context / pattern]
            )
            if not matches:
                raise self.fail(f"{what} {src}: no file in the build context matches")
            for m in matches:
                real = m.resolve()
                if real != self.context and self.context not in real.parents:
                    raise self.fail(f"{what} {src}: leaves the build context")
                if not m.exists():
                    raise self.fail(
                        f"{what} {src}: no such file in the build context ({self.context})"
                    )
                entries.append((m.name if m != self.context else "root", m))
        buf = io.BytesIO()
        names: list[str] = []
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for i, (name, item) in enumerate(entries):
                names.append("heredoc" if isinstance(item, bytes) else name)
                self._add(tf, f"s{i}", item, ignore, what)
        data = buf.getvalue()
        self.context_bytes += len(data)
        if self.context_bytes > MAX_CONTEXT_BYTES:
            raise self.fail(
                f"{what}: the build context copied so far is over {MAX_CONTEXT_BYTES} bytes"
            )
        return {"files": base64.b64encode(data).decode(), "names": names}

    def _add(
        self, tf: tarfile.TarFile, arc: str, item: Path | bytes, ignore: list[str], what: str
    ) -> None:
        if isinstance(item, bytes):
            info = tarfile.TarInfo(arc)
            info.size, info.mode = len(item), 0o644
            tf.addfile(info, io.BytesIO(item))
            return
        if what == "ADD" and item.is_file() and _ARCHIVE.search(item.name):
            self._add_archive(tf, arc, item)  # ADD unpacks a local archive into the destination
            return

        def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
            rel = os.path.relpath(
                os.path.join(str(item), ti.name[len(arc) :].lstrip("/")), self.context
            )
            if any(fnmatch(rel, p) or rel.startswith(p.rstrip("/") + "/") for p in ignore):
                return None
            if ti.issym():
                target = os.path.normpath(os.path.join(os.path.dirname(rel), ti.linkname))
                if ti.linkname.startswith("/") or target.startswith(".."):
                    raise self.fail(
                        f"{what}: the link {rel} -> {ti.linkname} points outside the build context"
                    )
            if not (ti.isfile() or ti.isdir() or ti.issym()):
                return None
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = 0  # the payload (and so the layer's cache key) depends on content only
            return ti

        tf.add(str(item), arcname=arc, recursive=True, filter=keep)

    def _add_archive(self, tf: tarfile.TarFile, arc: str, item: Path) -> None:
        dir_info = tarfile.TarInfo(arc)
        dir_info.type, dir_info.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(dir_info)
        try:
            with tarfile.open(item) as src:
                for m in src.getmembers():
                    name = os.path.normpath(m.name).lstrip("/")
                    if name.startswith("..") or not (m.isfile() or m.isdir() or m.issym()):
                        continue
                    m.name = f"{arc}/{name}"
                    tf.addfile(m, src.extractfile(m) if m.isfile() else None)
        except tarfile.TarError as e:
            raise self.fail(f"ADD {item.name}: not a readable archive ({e})") from e

    def _dockerignore(self) -> list[str]:
        p = self.context / ".dockerignore"
        if not p.is_file():
            return []
        return [
            ln.strip().lstrip("/")
            for ln in p.read_text().splitlines()
            if ln.strip() and not ln.startswith("#") and not ln.startswith("!")
        ]


def registry_hosts() -> tuple[str, ...]:
    """The hosts a build may download from: Debian's archive, PyPI, npm, and the operator's
    ``DOCKYARD_HARBOR_REGISTRIES`` (comma-separated; the sandbox's ``--registry`` hosts)."""
    extra = os.environ.get("DOCKYARD_HARBOR_REGISTRIES", "")
    return REGISTRY_HOSTS + tuple(h.strip().lower() for h in extra.split(",") if h.strip())


def read_image(dockerfile: Path, context: Path | None = None,
               registries: tuple[str, ...] | None = None) -> ParsedImage:  # fmt: skip
    """``dockerfile`` (build context: its folder) as a layered image; HarborFormatError names
    the line and the reason for anything that cannot be built here."""
    hosts = registries if registries is not None else registry_hosts()
    return _Reader(dockerfile, context or dockerfile.parent, hosts).read()
