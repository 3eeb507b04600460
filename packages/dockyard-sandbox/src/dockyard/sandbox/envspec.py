"""Wire format of provisioned environments, script verifiers and the interactive terminal.

A *provisioned environment* (:class:`EnvSpec`) is "a base + a list of steps": the base is the
sandbox's own read-only system (``base = "system"``); the steps extract files into the
starting tree or run shell commands once, at provisioning time. The result is cached by the
hash of the spec (:meth:`EnvSpec.key`) and shared read-only by every session that names it
(see ``provision.py``). SWE-bench's per-(repo, version) environments are written in it.

With ``image`` (``dockyard.sandbox.layers``) the environment is instead a stack of
copy-on-write layers over a Debian base root, built the way Docker builds a Dockerfile, and the
image is the jails' root (Harbor tasks use this).

Nothing here becomes a host path or a command-line option: ``workdir`` is a path *inside*
the jail (checked against the paths the jail itself uses), ``host_packages`` are plain Debian
package names, looked up in dpkg's status file and otherwise passed to apt after ``--`` in a
jail (``debs.py``), ``run`` steps run as shell text inside a jail.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dockyard.sandbox.layers.spec import ImageSpec

PROVISION_VERSION = "1"  # bump to invalidate every cached environment
ENV_MOUNT = "/opt/env"  # the environment's prefix inside every jail (read-only after build)
TESTS_MOUNT = "/tests"  # held-out verifier files (script verifier only)
LOGS_MOUNT = "/logs"  # verifier output; the reward at /logs/verifier/reward.txt|json

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PKG = re.compile(r"[a-z0-9][a-z0-9+.\-]{0,127}")
_DIR = re.compile(r"/[A-Za-z0-9_.\-/]{0,254}")
# where a workdir may not go: the jail's own mounts (toolchain, proc, dev, tmp, runner, prefix)
_RESERVED = (
    *("/usr", "/etc", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/proc", "/dev", "/sys"),
    *("/tmp", "/opt/dockyard", "/opt/dockyard-task", ENV_MOUNT, TESTS_MOUNT, LOGS_MOUNT, "/run"),
    *("/root", "/home", "/var", "/opt/conda"),
)
KEY = re.compile(r"[0-9a-f]{32}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_workdir(v: str) -> str:
    """A top-level directory inside the jail that none of its own mounts use (``/app``). One
    component only: bwrap creates the parents of a mount point root-only (0700)."""
    parts = v.rstrip("/").split("/")
    if not _DIR.fullmatch(v) or any(p in (".", "..") for p in parts[1:]) or "//" in v:
        raise ValueError(f"workdir {v[:80]!r}: give an absolute path of letters, digits, '._-/'")
    if len(parts) > 2:
        raise ValueError(f"workdir {v!r}: only a top-level directory (like /app) is supported")
    v = v.rstrip("/") or "/"
    if v == "/" or any(v == r or v.startswith(r + "/") or r.startswith(v + "/") for r in _RESERVED):
        raise ValueError(f"workdir {v!r} overlaps a path the sandbox mounts itself (refused)")
    return v


def check_image_workdir(v: str) -> str:
    """In an image any normalised absolute directory will do, except / and the sandbox's own
    mount points (the image's root is read-only; the workspace is bound over this path)."""
    parts = v.rstrip("/").split("/")
    if not _DIR.fullmatch(v) or any(p in (".", "..", "") for p in parts[1:]):
        raise ValueError(
            f"workdir {v[:80]!r}: give a normalised absolute path of letters, digits, '._-/'"
        )
    v = v.rstrip("/")
    own = (
        "/proc",
        "/dev",
        "/sys",
        "/tmp",
        "/opt/dockyard",
        "/opt/dockyard-task",
        TESTS_MOUNT,
        LOGS_MOUNT,
        ENV_MOUNT,
    )
    if not v or any(v == r or v.startswith(r + "/") for r in own):
        raise ValueError(f"workdir {v or '/'!r} is a path the sandbox mounts itself (refused)")
    return v


class EnvStep(_Model):
    """One provisioning step: exactly one of ``run`` (shell text, run with ``/bin/sh -c`` in
    the workdir) or ``files`` (a base64 ``.tar.gz`` extracted into the workdir tree)."""

    run: str | None = Field(None, max_length=100_000)
    files: str | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvStep:
        if (self.run is None) == (self.files is None):
            raise ValueError("an environment step holds exactly one of run / files")
        return self


class EnvSpec(_Model):
    """A provisioned environment: ``base`` + ``steps``, cached by :meth:`key`."""

    base: Literal["system"] = Field(
        "system", description="The sandbox's own read-only system (the only base there is)."
    )
    workdir: str = Field(
        "/workspace",
        description="Where the starting tree appears inside the jail (also at /workspace).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Variables of every step and jail."
    )
    host_packages: list[str] = Field(
        default_factory=list,
        description="Debian packages the environment needs: those the sandbox host lacks are "
        "fetched and unpacked into /opt/env/root at build time (needs --allow-network).",
    )
    steps: list[EnvStep] = Field(default_factory=list, max_length=128)
    timeout_s: float = Field(900.0, gt=0, le=7200, description="Wall clock of all run steps.")
    network: bool = Field(
        False, description="Run steps with the host network (needs --allow-network)."
    )
    image: ImageSpec | None = Field(
        None,
        description="A layered image (dockyard.sandbox.layers): a Debian base root + "
        "Dockerfile-like steps, built as Docker builds them and mounted read-only as / of "
        "every jail. Excludes steps and host_packages; workdir is the image's WORKDIR.",
    )

    @model_validator(mode="after")
    def _workdir(self) -> EnvSpec:
        v = self.workdir
        if self.image is not None:
            if self.steps or self.host_packages:
                raise ValueError("an environment with an image has no steps or host_packages")
            self.workdir = check_image_workdir(v)
        else:
            self.workdir = "/workspace" if v.rstrip("/") == "/workspace" else check_workdir(v)
        return self

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not _NAME.fullmatch(k) or "\x00" in val or len(val) > 4096:
                raise ValueError(f"env {k[:40]!r}: a variable name and a value without NUL")
        return v

    @field_validator("host_packages")
    @classmethod
    def _pkgs(cls, v: list[str]) -> list[str]:
        for p in v:
            if not _PKG.fullmatch(p):
                raise ValueError(f"host_packages: {p[:80]!r} is not a Debian package name")
        return v

    def key(self) -> str:
        """sha256 (32 hex digits) of the canonical JSON of the spec and the provisioner version."""
        blob = json.dumps(
            [PROVISION_VERSION, self.model_dump(mode="json")], sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:32]


class ScriptTests(_Model):
    """A Harbor-style verifier: ``files`` are placed read-only at ``/tests`` of a fresh jail
    built from the session's workspace diff; ``command`` runs there; the reward is the number in
    ``/logs/verifier/reward.txt`` (or ``reward`` in ``reward.json``), not the exit code."""

    files: dict[str, str] = Field(default_factory=dict, description="path under /tests -> text")
    binary_files: dict[str, str] = Field(
        default_factory=dict,
        description="path under /tests -> base64 bytes (a published task's images, archives)",
    )
    command: str = Field("bash /tests/test.sh", max_length=10_000)
    egress: bool = Field(
        False,
        description="The verifier reaches the package registries and the installer table (uv's "
        "install script) through the service's egress proxy, in its own network namespace: "
        "Terminal-Bench 2's shared preamble (apt-get install curl, uv, uvx) runs offline. "
        "Needs the service's --allow-network.",
    )
    allow_internet: bool = Field(
        False,
        description="The task declares it needs the internet (Harbor's allow_internet): a host "
        "the proxy refused makes the verdict needs_network, naming it, instead of the script's "
        "reward. Without it a refusal is reported beside the verdict (code under test asking "
        "for the network is the task's content, scored as such).",
    )


class TtyRequest(_Model):
    """Keystrokes for the session's persistent terminal (a tmux pane inside the session's jail).

    Each item of ``keys`` is literal text, or one named key in angle brackets: ``<Enter>``,
    ``<Tab>``, ``<Escape>``, ``<BSpace>``, ``<Up>``..., ``<C-c>``, ``<M-x>``, ``<F1>``. After
    them the service waits ``wait_s`` and returns the pane's visible screen."""

    keys: list[str] = Field(default_factory=list, max_length=64)
    wait_s: float = Field(0.5, ge=0, le=10)

    @field_validator("keys")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for k in v:
            if len(k) > 4096 or "\x00" in k:
                raise ValueError("keys: each item at most 4096 characters, no NUL")
        return v


class TtyResult(_Model):
    screen: str = ""
    alive: bool = True
    started: bool = Field(False, description="The terminal was (re)started by this call.")
