"""Docker Hub base images -> the Debian roots the sandbox builds (``debian:<r>`` / ``python:<r>``).

No image registry is reachable from the compute nodes; Debian's archive is. So ``FROM`` maps to
a root built from Debian's archive (``dockyard.sandbox.layers.bases``):

| ``FROM`` | base | exact? |
|---|---|---|
| ``debian:<release or 11/12/13>[-slim]``, ``debian:stable/latest`` | ``debian:<release>`` | yes |
| ``python:<X.Y>[-slim][-<release>]`` | ``python:<the release shipping X.Y>`` (3.9 bullseye, 3.11 bookworm, 3.13 trixie) | when X.Y is one of those; else the nearest, reported |
| ``ubuntu:<ver>`` | 20.04 -> bullseye, 22.04 -> bookworm, 24.04 and later -> trixie | approximated, reported |
| ``buildpack-deps:<...>`` | ``debian:<release>`` | approximated (compilers come from the Dockerfile's own apt lines) |
| Terminal-Bench's ``ghcr.io/laude-institute/t-bench/python-3-13`` / ``ubuntu-24-04`` | as python / ubuntu | approximated |

Anything else (alpine, node, golang, an image of your own...) is refused at load time, naming the
line, unless the operator adds a row: a TOML file named by ``DOCKYARD_HARBOR_BASES`` (or the
``table`` argument) with ``[images] "node:20" = "debian:bookworm"`` entries (exact
``repo:tag`` names; ``repo`` alone matches every tag), each reported as an approximation.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

RELEASE_PYTHON = {"bullseye": (3, 9), "bookworm": (3, 11), "trixie": (3, 13)}
DEBIAN_NUMBERS = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
UBUNTU = {(20, 4): "bullseye", (22, 4): "bookworm", (24, 4): "trixie"}
LATEST = "trixie"
_PREFIX = re.compile(r"(?:docker\.io/)?(?:library/)?")
_TBENCH = re.compile(r"ghcr\.io/laude-institute/t-bench/(python|ubuntu)-(\d+)-(\d+)[\w.\-]*")


@dataclass(frozen=True)
class BaseChoice:
    base: str  # debian:<release> | python:<release>
    note: str  # '' when exact, else what was approximated


class UnmappableBase(ValueError):
    pass


def _load_table(path: str | None) -> dict[str, str]:
    p = path or os.environ.get("DOCKYARD_HARBOR_BASES")
    if not p:
        return {}
    try:
        data = tomllib.loads(Path(p).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UnmappableBase(f"the base table {p}: {e}") from e
    images = data.get("images", {})
    if not isinstance(images, dict):
        raise UnmappableBase(f"the base table {p}: [images] must be a table")
    return {str(k).lower(): str(v) for k, v in images.items()}


def _nearest_python(want: tuple[int, int]) -> tuple[str, str]:
    """(release, note): the release shipping ``want``, or the nearest (newer on a tie)."""
    exact = [r for r, v in RELEASE_PYTHON.items() if v == want]
    if exact:
        return exact[0], ""
    rel = min(
        RELEASE_PYTHON,
        key=lambda r: (
            abs(RELEASE_PYTHON[r][1] - want[1]) if RELEASE_PYTHON[r][0] == want[0] else 99,
            -RELEASE_PYTHON[r][1],
        ),
    )
    have = ".".join(map(str, RELEASE_PYTHON[rel]))
    return (
        rel,
        f"python {want[0]}.{want[1]} is not shipped by any Debian release built here; using {rel} (python {have}, the nearest)",
    )


def _debian_release(tag: str) -> str | None:
    t = tag.split("-")[0]
    if t in RELEASE_PYTHON:
        return t
    if t in DEBIAN_NUMBERS:
        return DEBIAN_NUMBERS[t]
    if re.fullmatch(r"(\d+)(?:\.\d+)*", t) and t.split(".")[0] in DEBIAN_NUMBERS:
        return DEBIAN_NUMBERS[t.split(".")[0]]
    if t in ("stable", "latest", ""):
        return LATEST
    return None


def _python(tag: str) -> BaseChoice | None:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:\.\d+)?((?:-[a-z0-9.]+)*)", tag or "3")
    if tag in ("", "latest", "slim"):
        return BaseChoice(f"python:{LATEST}", "")
    if not m:
        return None
    want = (int(m.group(1)), int(m.group(2)) if m.group(2) else RELEASE_PYTHON[LATEST][1])
    suffixes = [s for s in (m.group(3) or "").split("-") if s and s != "slim"]
    rels = [s for s in suffixes if s in RELEASE_PYTHON]
    if any(s.startswith("alpine") or s.startswith("windows") for s in suffixes):
        return None
    if rels:
        rel = rels[0]
        have = RELEASE_PYTHON[rel]
        note = "" if have == want else (
            f"python {want[0]}.{want[1]} on {rel}: Debian's {rel} ships python {have[0]}.{have[1]}; using it")  # fmt: skip
        return BaseChoice(f"python:{rel}", note)
    rel, note = _nearest_python(want)
    return BaseChoice(f"python:{rel}", note)


def _ubuntu(tag: str) -> BaseChoice | None:
    named = {"focal": (20, 4), "jammy": (22, 4), "noble": (24, 4), "latest": (24, 4), "": (24, 4)}
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", tag.split("-")[0])
    ver = (int(m.group(1)), int(m.group(2))) if m else named.get(tag.split("-")[0])
    if ver is None:
        return None
    rel = UBUNTU.get(ver) or (
        "trixie" if ver >= (24, 4) else "bullseye" if ver < (22, 4) else "bookworm"
    )
    return BaseChoice(
        f"debian:{rel}",
        f"ubuntu:{tag or 'latest'} approximated by Debian {rel} (nearest release; Ubuntu images are not reachable)",
    )


def choose(image: str, table: str | None = None) -> BaseChoice:
    """The base for ``image`` (a ``FROM`` argument) or :class:`UnmappableBase` saying why."""
    ref = image.split("@", 1)[0].lower()
    pinned = "@" in image
    extra = _load_table(table)
    repo, _, tag = _PREFIX.sub("", ref, count=1).partition(":")
    note_pin = " (digest pin not kept)" if pinned else ""
    for key in (f"{repo}:{tag}", repo):
        if key in extra:
            return BaseChoice(
                extra[key], f"{image} mapped to {extra[key]} by the operator's base table{note_pin}"
            )
    m = _TBENCH.fullmatch(ref.split(":")[0])
    if m:
        kind, a, b = m.groups()
        got = _python(f"{a}.{b}") if kind == "python" else _ubuntu(f"{a}.{b}")
        if got is not None:
            return BaseChoice(
                got.base, f"{image}: Terminal-Bench's base approximated by {got.base}"
            )
    choice: BaseChoice | None = None
    if repo == "debian":
        rel = _debian_release(tag)
        choice = BaseChoice(f"debian:{rel}", "") if rel else None
    elif repo == "python":
        choice = _python(tag)
    elif repo == "ubuntu":
        choice = _ubuntu(tag)
    elif repo == "buildpack-deps":
        rel = _debian_release(tag) or (_ubuntu(tag).base.split(":")[1] if _ubuntu(tag) else None)
        choice = BaseChoice(f"debian:{rel}", f"{image} approximated by debian:{rel} (compilers come from the Dockerfile's own apt lines)") if rel else None  # fmt: skip
    if choice is None:
        raise UnmappableBase(
            f"FROM {image}: no Debian root approximates this image (debian, python, ubuntu and "
            "buildpack-deps map; add a row to the base table named by DOCKYARD_HARBOR_BASES)"
        )
    return BaseChoice(choice.base, choice.note + note_pin) if pinned else choice
