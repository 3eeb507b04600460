"""The sandbox's ``Localhost`` seccomp profile: the container runtime's own default profile with
the calls bubblewrap makes allowed without a capability.

The runtimes' default profiles (Docker's, which containerd, CRI-O and podman follow) allow the
namespace calls only to a container holding ``CAP_SYS_ADMIN`` — podman's, for one, allows
``unshare`` and ``mount`` to anyone but ``sethostname`` and ``setns`` only with the capability,
and bubblewrap sets the jail's hostname. The hardened sandbox pod
(``examples/k8s/infra/onprem-hardened.yaml``) adds no capability and names a ``Localhost``
profile instead; this writes it from the node's runtime's default, so everything else the
runtime denies stays denied::

    python -m dockyard.k8s.seccomp /usr/share/containers/seccomp.json > dockyard-bwrap.json

(containerd embeds its default in the binary: write it out first, for example with
``ctr`` or from the containerd source of the running version.) ``tests/k8s/test_image_build.py``
runs the built sandbox image under the profile made from podman's default.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

BWRAP_CALLS = (
    "clone",
    "clone3",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "sethostname",
    "setdomainname",
)
"""What bubblewrap calls to build a jail (user, pid, net, ipc, uts and mount namespaces, its
root, the hostname)."""


def bwrap_profile(default: dict[str, Any]) -> dict[str, Any]:
    """``default`` (a runtime's seccomp profile, OCI/Docker JSON) with :data:`BWRAP_CALLS`
    allowed unconditionally: removed from every rule that gates them on a capability, and one
    rule allowing them added. Rules that filter a call by its arguments (``clone``'s flags on
    some profiles) are dropped for these calls only; nothing else changes."""
    if not isinstance(default.get("syscalls"), list):
        raise ValueError("not a seccomp profile: no 'syscalls' list")
    out = copy.deepcopy(default)
    rules = []
    for rule in out["syscalls"]:
        names = [n for n in rule.get("names", []) if n not in BWRAP_CALLS]
        if names:
            rules.append({**rule, "names": names})
        elif not rule.get("names"):
            rules.append(rule)
    rules.append({"names": list(BWRAP_CALLS), "action": "SCMP_ACT_ALLOW"})
    out["syscalls"] = rules
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("default", type=Path, help="the runtime's default profile (JSON)")
    args = ap.parse_args(argv)
    try:
        profile = bwrap_profile(json.loads(args.default.read_text()))
    except (OSError, ValueError) as e:
        print(f"dockyard.k8s.seccomp: {args.default}: {e}", file=sys.stderr)
        return 2
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
