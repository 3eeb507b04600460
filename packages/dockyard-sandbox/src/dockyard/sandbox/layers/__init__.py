"""Layered images: a Dockerfile built the way Docker builds it, without Docker.

The API is generic — a base + a list of Dockerfile-like steps, per build stage — so any front
end can use it (Harbor's Dockerfiles: ``dockyard.envs.harbor.image``; SWE-bench's environment
specs can emit the same). A client sends it as ``EnvSpec(image=ImageSpec(...), workdir=...)``
in a session's or a one-shot task's ``environment``; the service builds (or finds) every layer
and runs every jail of that environment on the result::

    {"workdir": "/app",                                  # where the workspace is bound
     "timeout_s": 900,                                   # the whole build's wall clock
     "image": {"stages": [
        {"name": "build", "base": "python:trixie", "steps": [
            {"workdir": "/src"},
            {"copy": {"files": "<base64 tar: s0, s1...>", "names": ["tool"], "dest": "./"}},
            {"run": "python3 -m zipapp tool -o /out/tool.pyz"}]},
        {"base": "debian:trixie", "steps": [
            {"run": "apt-get update && apt-get install -y sqlite3"},
            {"env": {"PATH": "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
            {"copy": {"from_stage": "build", "paths": ["/out/tool.pyz"], "names": ["tool.pyz"],
                      "dest": "/opt/bin/", "chown": "root", "chmod": "0755"}},
            {"user": "nobody"}, {"run": "whoami"}, {"user": "root"},
            {"workdir": "/app"}]}],
       "notes": ["for the build log"]}}

Modules: ``spec`` (the wire format above, validated), ``bases`` (Debian roots from
``mmdebstrap``: ``debian:<release>``, ``python:<release>``), ``build`` (the step executor and
its cache keys), ``store`` (layers on disk, image mounts over id-mapped views, size, LRU
eviction), ``runner`` (one build jail under cgroups and a wall clock), ``jail_main`` (the build
jail itself: user namespace, overlay, pivot_root, the step), ``idmap_main`` (id-mapped views).
Failures: ``build.BuildFailed`` (a step: its number, exit code, the log) and
``bases.BaseError``, both surfaced as ``provision.ProvisionFailed`` (HTTP 422).
"""
