"""Dockerfile syntax: logical lines (continuations, comments, heredocs) and Docker's variable
substitution (``$V``, ``${V}``, ``${V:-default}``, ``${V:+alt}``), shared by the readers."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_HEREDOC = re.compile(r"<<(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class Instruction:
    line: int  # first physical line
    text: str  # the instruction with continuations joined (heredoc bodies not included)
    heredocs: list[tuple[str, str]] = field(default_factory=list)  # (delimiter, body)

    @property
    def op(self) -> str:
        return self.text.split(None, 1)[0].upper() if self.text else ""

    @property
    def rest(self) -> str:
        parts = self.text.split(None, 1)
        return parts[1].strip() if len(parts) > 1 else ""


def instructions(text: str) -> list[Instruction]:
    """Logical instructions: ``\\`` continuations joined, comment lines dropped (also inside a
    continued instruction), BuildKit heredocs (``<<EOF`` ... ``EOF``) collected."""
    out: list[Instruction] = []
    lines = text.splitlines()
    i, buf, start = 0, "", 0
    while i < len(lines):
        raw = lines[i].rstrip()
        i += 1
        if not buf and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if buf and raw.lstrip().startswith("#"):
            continue
        if not buf:
            start = i
        if raw.endswith("\\"):
            buf += raw[:-1] + " "
            continue
        ins = Instruction(start, (buf + raw).strip())
        buf = ""
        for dash, _, delim in _HEREDOC.findall(ins.text):
            body: list[str] = []
            while i < len(lines) and (lines[i].lstrip("\t") if dash else lines[i]) != delim:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            ins.heredocs.append((delim, "\n".join(body) + "\n"))
        out.append(ins)
    if buf:
        out.append(Instruction(start, buf.strip()))
    return out


def expand(value: str, scope: dict[str, str]) -> str:
    """Docker's substitution in ENV / ARG / WORKDIR / COPY / USER / FROM arguments."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        val = scope.get(name)
        if m.group(2) == "-":
            return val if val else m.group(3)
        if m.group(2) == "+":
            return m.group(3) if val else ""
        return val or ""

    return _VAR.sub(sub, value)


def kv_pairs(rest: str) -> list[tuple[str, str]]:
    """``K=V K2="v 2"`` or the legacy ``K V`` form (values unquoted, not expanded)."""
    toks = shlex.split(rest, posix=True)
    if toks and "=" not in toks[0]:
        return [(toks[0], rest.split(None, 1)[1].strip() if len(rest.split(None, 1)) > 1 else "")]
    return [tuple(t.split("=", 1)) for t in toks if "=" in t]  # type: ignore[misc]


def split_flags(rest: str) -> tuple[dict[str, str], str]:
    """Leading ``--flag=value`` / ``--flag`` options of an instruction and what follows."""
    flags: dict[str, str] = {}
    while rest.startswith("--"):
        tok, _, rest = rest.partition(" ")
        k, _, v = tok[2:].partition("=")
        flags[k] = v
        rest = rest.lstrip()
    return flags, rest
