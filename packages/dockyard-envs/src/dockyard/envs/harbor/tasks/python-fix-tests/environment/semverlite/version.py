"""A SemVer 2.0.0 version: ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``.

Precedence (SemVer §11): MAJOR, MINOR, PATCH compared numerically; a pre-release version has lower
precedence than the same version without one; pre-release identifiers are compared one by one
from the left: numeric identifiers numerically, alphanumeric ones in ASCII order, a numeric one
lower than an alphanumeric one, and a shorter list lower when all its identifiers are equal to the
longer one's. Build metadata is kept (``str``) but ignored for precedence and equality.
"""

from __future__ import annotations

import functools
import re

_NUM = r"0|[1-9]\d*"
_IDENT = r"[0-9A-Za-z-]+"
_RE = re.compile(
    rf"^(?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?(?:\+(?P<build>{_IDENT}(?:\.{_IDENT})*))?$"
)


@functools.total_ordering
class Version:
    """An immutable parsed version; compare with ``<``, ``==``, ``sorted``..."""

    def __init__(self, text: str):
        m = _RE.match(text)
        if not m:
            raise ValueError(f"not a semantic version: {text!r}")
        self.major = m["major"]
        self.minor = m["minor"]
        self.patch = m["patch"]
        self.prerelease = tuple(m["pre"].split(".")) if m["pre"] else ()
        self.build = tuple(m["build"].split(".")) if m["build"] else ()
        for ident in self.prerelease:
            if ident.isdigit() and len(ident) > 1 and ident[0] == "0":
                raise ValueError(f"numeric pre-release identifier with a leading zero: {text!r}")

    def _key(self):
        return (self.major, self.minor, self.patch, self.prerelease)

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            s += "-" + ".".join(self.prerelease)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self):
        return f"Version({str(self)!r})"


def bump(version: str, part: str) -> str:
    """The next version after ``version`` for a ``part`` in major/minor/patch, as a string.

    Lower parts reset to 0, pre-release and build are dropped; a pre-release is bumped to its
    release when the lower parts are already 0 (``1.3.0-rc.1`` minor -> ``1.3.0``,
    ``2.0.0-beta`` major -> ``2.0.0``, ``1.2.3-rc.1`` patch -> ``1.2.3``).
    """
    v = Version(version)
    major, minor, patch = int(v.major), int(v.minor), int(v.patch)
    pre = bool(v.prerelease)
    if part == "major":
        return f"{major}.0.0" if pre and minor == patch == 0 else f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor}.0" if pre and patch == 0 else f"{major}.{minor + 1}.0"
    if part == "patch":
        return f"{major}.{minor}.{patch}" if pre else f"{major}.{minor}.{patch + 1}"
    raise ValueError(f"part must be major, minor or patch, not {part!r}")


def sort_versions(versions: list[str]) -> list[str]:
    """``versions`` sorted by precedence, lowest first (stable for equal precedence)."""
    return sorted(versions, key=Version)
