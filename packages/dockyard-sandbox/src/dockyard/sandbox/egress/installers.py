"""The installer table: well-known installer URLs answered from the package registries.

Verifier preambles (Terminal-Bench 2's shared ``tests/test.sh``) pipe a vendor's installer into
``sh``: ``curl -LsSf https://astral.sh/uv/<version>/install.sh | sh``. A compute node that reaches
only the registries cannot fetch it, but the program it installs is on PyPI as a wheel. A table
entry maps such a URL to a PyPI project; the proxy answers the URL itself, over TLS with the
service's CA (``tls.py``), with a script of its own (:func:`install_script`) that

* picks the machine (``uname -m``: x86_64, aarch64) and C library (glibc or musl),
* downloads the project's binaries from ``https://<table host>/.dockyard/<project>/<version>/
  <arch>-<libc>/<binary>`` (answered by the proxy too: :meth:`InstallerTable.answer`),
* installs them where the vendor's installer does: ``$<PROJECT>_INSTALL_DIR``, else
  ``$XDG_BIN_HOME``, else ``$HOME/.local/bin``, and writes the ``env`` file there that puts the
  directory on ``PATH`` when sourced (``source $HOME/.local/bin/env``).

The binaries come from the project's wheel for that platform (``manylinux``/``musllinux``),
resolved on PyPI's simple index (JSON, PEP 691), fetched by the service through the same checks
as the jail's own connections (``Proxy.resolve``: an allowlisted host, a public address unless
named), verified against the index's sha256, and the ``<project>-<version>.data/scripts/<binary>``
members read out of it (nothing else of the archive is unpacked). They are cached per process
in a 0700 directory. A URL without a version gets the newest release on the index.

Entries: :meth:`InstallerTable.default` (uv: ``/uv/install.sh``, ``/uv/<version>/install.sh`` on
``astral.sh``); :meth:`InstallerTable.parse` reads the operator's ``URL=project[:bin,bin...]``
(``{version}`` in the URL's path marks the version). Requests for anything else on a table host
get 404 and count as a refused host.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import dockyard.sandbox.egress.http1 as http1
import dockyard.sandbox.egress.tls as tls
from dockyard.sandbox.egress.allow import normalize_host
from dockyard.sandbox.egress.http1 import Refused
from dockyard.sandbox.egress.wheels import Binaries, Resolver

_VERSION = r"(?P<version>[0-9][0-9A-Za-z.+!-]{0,40})"
_BIN_PATH = re.compile(
    r"/\.dockyard/(?P<project>[a-z0-9._-]+)/(?P<version>[0-9][0-9A-Za-z.+!-]{0,40})/"
    r"(?P<arch>x86_64|aarch64)-(?P<libc>gnu|musl)/(?P<binary>[A-Za-z0-9._-]+)"
)
CHUNK = 1 << 16


class Proxy(Resolver, Protocol):
    """What the table needs of the proxy that calls it (``proxy.Proxy``)."""

    head_deadline_s: float
    idle_s: float


@dataclass(frozen=True)
class Installer:
    """``https://<host><path>`` (``path``: a regex, ``version`` group optional) installs the
    ``binaries`` of PyPI project ``project``."""

    host: str
    path: re.Pattern[str]
    project: str
    binaries: tuple[str, ...]


class InstallerTable:
    """The table's entries and what the proxy answers for them (module doc)."""

    def __init__(self, entries: Iterable[Installer] = (), cache: Binaries | None = None) -> None:
        self.entries = tuple(entries)
        self.hosts = frozenset(e.host for e in self.entries)
        self.binaries = cache or Binaries.shared()

    @classmethod
    def default(cls) -> InstallerTable:
        return cls.parse([
            "https://astral.sh/uv/install.sh=uv:uv,uvx",
            "https://astral.sh/uv/{version}/install.sh=uv:uv,uvx",
        ])  # fmt: skip

    @classmethod
    def parse(cls, specs: Iterable[str]) -> InstallerTable:
        """Entries from ``https://host/path={version}...=project[:bin,bin]`` lines (ValueError
        naming the line otherwise)."""
        out = []
        for spec in specs:
            url, sep, what = spec.rpartition("=")
            project, _, bins = what.partition(":")
            parts = urlsplit(url)
            host = normalize_host(parts.hostname or "")
            if not sep or parts.scheme != "https" or host is None or parts.query or parts.port:
                raise ValueError(
                    f"installer {spec!r}: expected https://HOST/PATH=PROJECT[:BIN,BIN] "
                    "(e.g. https://astral.sh/uv/{version}/install.sh=uv:uv,uvx)"
                )
            if not re.fullmatch(r"[A-Za-z0-9._-]+", project):
                raise ValueError(f"installer {spec!r}: {project!r} is not a PyPI project name")
            names = tuple(b for b in bins.split(",") if b) or (project,)
            path = re.escape(parts.path).replace(re.escape("{version}"), _VERSION)
            out.append(Installer(host, re.compile(path), project.lower(), names))
        return cls(out)

    # -- answering a table host ------------------------------------------------------------
    async def serve_tls(
        self,
        proxy: Proxy,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
    ) -> None:
        """One request to ``https://host/...`` on a tunnel the proxy accepted (module doc)."""
        ctx = tls.authority(self.hosts).context(host)
        try:
            async with asyncio.timeout(proxy.head_deadline_s):
                await writer.start_tls(ctx)
                head = await http1.read_head(reader)
        except TimeoutError:
            raise Refused(
                408, f"{host}: no TLS request within {proxy.head_deadline_s:g} s"
            ) from None
        if head.method not in ("GET", "HEAD"):
            raise Refused(405, f"https://{host}: method {head.method[:20]!r} (only GET, HEAD)")
        http1.check_no_body(head)
        http1.check_host_header(head, host, 443, 443)
        path = urlsplit(head.target).path if head.target.startswith("https://") else head.target
        loop = asyncio.get_running_loop()
        ctype, body = await loop.run_in_executor(None, self.answer, proxy, host, path)
        size = len(body) if isinstance(body, bytes) else body.stat().st_size
        writer.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {size}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        if head.method == "GET":
            await _send(writer, body, proxy.idle_s)
        async with asyncio.timeout(proxy.idle_s):
            await writer.drain()

    def answer(self, proxy: Proxy, host: str, path: str) -> tuple[str, bytes | Path]:
        """(content type, body or a file) for ``https://host{path}`` (blocking), else 404."""
        for e in self.entries:
            m = e.path.fullmatch(path) if e.host == host else None
            if m:
                version = m.groupdict().get("version") or self.binaries.latest(proxy, e.project)
                return "text/x-sh", install_script(e, host, version).encode()
        b = _BIN_PATH.fullmatch(path)
        entry = next((e for e in self.entries if b and e.host == host
                      and e.project == b["project"] and b["binary"] in e.binaries), None)  # fmt: skip
        if b and entry:
            f = self.binaries.get(proxy, entry.project, b["version"], b["arch"], b["libc"])
            return "application/octet-stream", f / b["binary"]
        raise Refused(404, f"https://{host}{path[:200]} is not in the installer table", host)


async def _send(writer: asyncio.StreamWriter, body: bytes | Path, idle_s: float) -> None:
    if isinstance(body, bytes):
        writer.write(body)
        return
    with body.open("rb") as f:
        while chunk := f.read(CHUNK):
            writer.write(chunk)
            async with asyncio.timeout(idle_s):
                await writer.drain()


def install_script(e: Installer, host: str, version: str) -> str:
    """The stand-in installer for entry ``e`` at ``version`` (module doc)."""
    var = re.sub(r"[^A-Z0-9]", "_", e.project.upper()) + "_INSTALL_DIR"
    base = f"https://{host}/.dockyard/{e.project}/{version}"
    names = " ".join(shlex.quote(b) for b in e.binaries)
    return f"""#!/bin/sh
# dockyard egress: a stand-in for https://{host}'s installer of {e.project} {version}. It installs
# the binaries of PyPI's {e.project} wheel, fetched by the sandbox's registry proxy.
set -eu
case "$(uname -m)" in
    x86_64 | amd64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) echo "{e.project} installer: machine $(uname -m) is not supported" >&2; exit 1 ;;
esac
libc=gnu
if ls /lib/ld-musl-* >/dev/null 2>&1; then libc=musl; fi
dir="${{{var}:-${{XDG_BIN_HOME:-$HOME/.local/bin}}}}"
mkdir -p "$dir"
fetch() {{
    if command -v curl >/dev/null 2>&1; then curl -fsSL "$1" -o "$2"
    elif command -v wget >/dev/null 2>&1; then wget -q "$1" -O "$2"
    else echo "{e.project} installer: needs curl or wget" >&2; exit 1
    fi
}}
for b in {names}; do
    fetch "{base}/$arch-$libc/$b" "$dir/.$b.part"
    chmod 755 "$dir/.$b.part"
    mv -f "$dir/.$b.part" "$dir/$b"
done
cat > "$dir/env" <<EOF
#!/bin/sh
# puts $dir on PATH once (written by the {e.project} installer)
case ":\\${{PATH}}:" in
    *:"$dir":*) ;;
    *) export PATH="$dir:\\$PATH" ;;
esac
EOF
echo "installed {e.project} {version} ({names}) to $dir"
"""
