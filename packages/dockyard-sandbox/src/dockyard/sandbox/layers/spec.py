"""Wire format of a layered image: a base + Dockerfile-like steps, per build stage.

This is the builder's whole API (``dockyard.sandbox.layers``): any front end — Harbor's
Dockerfile mapping, SWE-bench's per-(repo, version) specs — writes an :class:`ImageSpec`; the
service builds it into content-addressed, cached layers (``build.py``) and runs every jail of
the environment on the result (read-only, the workspace at the WORKDIR).

Shapes::

    ImageSpec  {"stages": [ImageStage, ...],       # the last stage is the image
                "notes": ["..."]}                  # written at the top of the build log
    ImageStage {"name": "builder" | null, "base": BASE, "steps": [ImageStep, ...]}
      BASE     "debian:<release>"                  # a root built from Debian's archive
               "python:<release>"                  # the same + python3, pip, python-is-python3
               "stage:<name>"                      # an earlier stage's result
    ImageStep  exactly one of
      {"run": "shell text"}                        # /bin/sh -c, as the stage's USER, in WORKDIR
      {"copy": CopyStep}                           # Docker's COPY / ADD (local files)
      {"workdir": "/abs/path"}                     # created (root 0755) if missing
      {"env": {"K": "v"}}                          # persisted in the image, seen by later RUNs
      {"arg": {"K": "v"}}                          # seen by later RUNs of the stage only
      {"user": "name[:group]" | "uid[:gid]"}       # later RUN / COPY --chown default: root
    CopyStep   {"files": base64 tar | null,        # one entry per source: s0, s1, ... (file or dir)
                "from_stage": name | null, "paths": [...],  # or: paths of an earlier stage
                "names": [basename per source], "dest": str, "chown": str | null,
                "chmod": "0755" | null}

Nothing here becomes a host path or an option: ``run`` is shell text inside the build jail,
paths are paths inside the image, ``base`` is one of a fixed set of names (``bases.py``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RELEASES = ("bullseye", "bookworm", "trixie")
BASE = re.compile(rf"(?:debian|python):(?:{'|'.join(RELEASES)})|stage:[A-Za-z0-9_.\-]{{1,64}}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDS = re.compile(r"[A-Za-z0-9_.\-]{1,32}(?::[A-Za-z0-9_.\-]{1,32})?")
_PATH_MAX = 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _abs(v: str, what: str) -> str:
    if not v.startswith("/") or "\x00" in v or len(v) > _PATH_MAX:
        raise ValueError(f"{what} {v[:80]!r}: an absolute path inside the image")
    return v


class CopyStep(_Model):
    files: str | None = Field(None, description="base64 tar of the sources (s0, s1, ...)")
    from_stage: str | None = Field(None, pattern=r"[A-Za-z0-9_.\-]{1,64}")
    paths: list[str] = Field(default_factory=list, max_length=64)
    names: list[str] = Field(default_factory=list, max_length=4096)
    dest: str = Field(..., min_length=1, max_length=_PATH_MAX)
    chown: str | None = Field(None, pattern=_IDS.pattern)
    chmod: str | None = Field(None, pattern=r"0?[0-7]{3,4}")

    @model_validator(mode="after")
    def _source(self) -> CopyStep:
        if (self.files is None) == (self.from_stage is None):
            raise ValueError("copy: exactly one of files / from_stage")
        if self.from_stage is not None:
            for p in self.paths:
                _abs(p, "copy --from path")
            if len(self.paths) != len(self.names):
                raise ValueError("copy: one name per path")
        if "\x00" in self.dest or any("/" in n or n in ("", ".", "..") for n in self.names):
            raise ValueError("copy: names are plain file names, dest has no NUL")
        return self


class ImageStep(_Model):
    run: str | None = Field(None, max_length=100_000)
    copy_: CopyStep | None = Field(None, alias="copy")
    workdir: str | None = None
    env: dict[str, str] | None = None
    arg: dict[str, str] | None = None
    user: str | None = Field(None, pattern=_IDS.pattern)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one(self) -> ImageStep:
        set_ = [
            k
            for k in ("run", "copy_", "workdir", "env", "arg", "user")
            if getattr(self, k) is not None
        ]
        if len(set_) != 1:
            raise ValueError(f"an image step holds exactly one operation (got {set_ or 'none'})")
        if self.workdir is not None:
            _abs(self.workdir, "workdir")
        for d in (self.env, self.arg):
            for k, val in (d or {}).items():
                if not _NAME.fullmatch(k) or "\x00" in val or len(val) > 8192:
                    raise ValueError(f"variable {k[:40]!r}: a name and a value without NUL")
        return self

    def canonical(self) -> dict:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ImageStage(_Model):
    name: str | None = Field(None, pattern=r"[A-Za-z0-9_.\-]{1,64}")
    base: str
    steps: list[ImageStep] = Field(default_factory=list, max_length=256)

    @field_validator("base")
    @classmethod
    def _base(cls, v: str) -> str:
        if not BASE.fullmatch(v):
            raise ValueError(
                f"base {v[:80]!r}: one of debian:<release>, python:<release> ({', '.join(RELEASES)}) "
                "or stage:<name>"
            )
        return v


class ImageSpec(_Model):
    stages: list[ImageStage] = Field(..., min_length=1, max_length=16)
    notes: list[str] = Field(
        default_factory=list, max_length=256,
        description="For humans: written at the top of the build log (approximated bases...).",
    )  # fmt: skip

    @model_validator(mode="after")
    def _refs(self) -> ImageSpec:
        seen: set[str] = set()
        for i, st in enumerate(self.stages):
            refs = [st.base[6:]] if st.base.startswith("stage:") else []
            refs += [s.copy_.from_stage for s in st.steps if s.copy_ and s.copy_.from_stage]
            for r in refs:
                if r not in seen:
                    raise ValueError(f"stage {i}: {r!r} is not an earlier stage")
            seen |= {st.name or str(i), str(i)}
        return self
