"""Layered images vs prefix environments vs bubblewrap by hand: build, session start, round trip.

A real ``dockyard-sandbox serve --allow-network`` with its own (fresh, or ``--cache``) env cache
builds the same small environment two ways:

* **layers** — ``FROM python:3.13-slim``-like: base ``python:trixie`` (mmdebstrap), then
  ``WORKDIR /app``, ``RUN pip install six``, ``RUN apt-get install tree``, ``COPY`` one file;
* **prefix** — the previous provisioning (``EnvSpec`` steps over the host's system): ``pip
  install six`` into /opt/env, the file as a ``files`` step (``tree`` as a host package when the
  host lacks it).

Per way it prints: the cold build (per layer, from the build log; the base root separately), the
warm "session requested -> first command ran" (``create_session`` + ``exec("true")``, the
environment cached), and a command round trip (``exec("true")`` in a live session), as medians
of ``--rounds``, the starts ``--pause`` apart (an episode's rest). A layered image's session is measured both ways the sandbox runs one: as its
container (the default: pid 1 holding the namespaces and the session's writable layer, each
command entering it) and as bwrap jails over the read-only image (``container: false``); the
container twice: with the service's warm pool (``--warm-containers``, its default: the next
session's container started while the previous one runs) and, in a second service over the same
cache, without (``--warm-containers 0``). The floor is ``bwrap`` started by hand on the same image root (the image's
read-only overlay mounted by the service): ``bwrap --ro-bind ROOT / --proc /proc --dev /dev
--tmpfs /tmp --unshare-pid --unshare-net --unshare-ipc -- /bin/true``, timed from this process
(fork+exec+wait). Goal: warm session start within 1.5x that floor.

    .venv/bin/python bench/layers_session.py [--rounds 20] [--pause 0.1] [--cache DIR]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from dockyard.sandbox.egress import non_public_registries
from dockyard.sandbox.launch import start_service


def _tar_b64(name: str, data: bytes, mode: str) -> str:
    """One file as a base64 tar (``mode`` "w" for a copy step, "w:gz" for a files step)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


HELLO = b"print('hello')\n"


def layered_env() -> dict:
    steps = [
        {"workdir": "/app"},
        {"run": "pip install --no-cache-dir six==1.17.0"},
        {"run": "apt-get update && apt-get install -y --no-install-recommends tree && rm -rf /var/lib/apt/lists/*"},
        {"copy": {"files": _tar_b64("s0", HELLO, "w"), "names": ["hello.py"], "dest": "/app"}},
    ]  # fmt: skip
    return {"workdir": "/app", "image": {"stages": [{"base": "python:trixie", "steps": steps}]}}


def prefix_env() -> dict:
    files = _tar_b64("hello.py", HELLO, "w:gz")
    steps = [{"run": "pip install --no-cache-dir six==1.17.0"}, {"files": files}]
    return {"workdir": "/app", "network": True, "host_packages": ["tree"], "steps": steps}


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.1f} ms"


def measure(client, env: dict, rounds: int, pause: float, **session) -> dict:
    t0 = time.perf_counter()
    sid = client.create_session({"environment": env, **session})
    cold = time.perf_counter() - t0
    starts, trips, ends = [], [], []
    for _ in range(rounds):
        time.sleep(pause)  # the rest of an episode (where a warm pool refills)
        t0 = time.perf_counter()
        s = client.create_session({"environment": env, **session})
        r = client.exec(s, "true")
        starts.append(time.perf_counter() - t0)
        assert r.exit_code == 0, r.stderr
        t0 = time.perf_counter()
        client.delete_session(s)
        ends.append(time.perf_counter() - t0)
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.exec(sid, "true")
        trips.append(time.perf_counter() - t0)
    client.delete_session(sid)
    return {"cold": cold, "start": starts, "trip": trips, "end": ends}


def floor(root: Path, rounds: int) -> list[float]:
    argv = ["bwrap", "--ro-bind", str(root), "/", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--", "/bin/true"]  # fmt: skip
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        out.append(time.perf_counter() - t0)
    return out


FS_PROBE = r"""
set -e
cd "$1"; shift
mkdir -p "$TMPDIR_K" "$TMPDIR_F"
mount -t overlay overlay -o "ro,userxattr,lowerdir=$LOWER" "$TMPDIR_K"
fuse-overlayfs -o "lowerdir=$LOWER" "$TMPDIR_F"
for m in "$TMPDIR_K" "$TMPDIR_F"; do
  t0=$(date +%s%N)
  find "$m/usr" -xdev | wc -l > /dev/null
  t1=$(date +%s%N)
  for i in 1 2 3 4 5; do chroot "$m" /usr/bin/python3 -c pass; done
  t2=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000000 )) $(( (t2 - t1) / 5000000 ))"
done
fusermount3 -u "$TMPDIR_F" 2>/dev/null || umount "$TMPDIR_F"
"""


def overlay_vs_fuse(cache: Path, top: str) -> list[tuple[str, int, int]] | None:
    """Kernel overlayfs vs fuse-overlayfs over the same layers, inside ``unshare -Urm`` (an
    unprivileged user namespace, as the build jail): (driver, ms to walk /usr, ms per
    ``python3 -c pass``). None when fuse-overlayfs is not installed."""
    if shutil.which("fuse-overlayfs") is None:
        return None
    layers_dir = cache / "layers" / "layers"
    meta = json.loads((layers_dir / top / "meta.json").read_text())
    base = next((cache / "layers" / "bases").glob("*/root"))
    lower = ":".join(
        [f"{k}/diff" for k in reversed([*meta["chain"], top])] + [os.path.relpath(base, layers_dir)]
    )
    tmp = Path(tempfile.mkdtemp(prefix="dockyard-fs-"))
    env = {**os.environ, "LOWER": lower, "TMPDIR_K": str(tmp / "k"), "TMPDIR_F": str(tmp / "f")}
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", FS_PROBE, "sh", str(layers_dir)],
                       env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode != 0:
        print(f"  (overlay vs fuse-overlayfs probe failed: {r.stderr.strip()[-300:]})")
        return None
    rows = [tuple(map(int, line.split())) for line in r.stdout.split("\n") if line.strip()]
    return [("kernel overlayfs", *rows[0]), ("fuse-overlayfs", *rows[1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--pause", type=float, default=0.1,
                    help="seconds between warm session starts (the rest of an episode; 0: a tight "
                    "loop, where a warm pool's refill cannot keep up)")  # fmt: skip
    ap.add_argument("--cache", default=None, help="env cache dir (default: a fresh temp dir: cold)")
    args = ap.parse_args()
    cache = Path(args.cache or tempfile.mkdtemp(prefix="dockyard-bench-layers-"))
    extra = ["--allow-network", "--env-cache-dir", str(cache)]
    for host in non_public_registries():  # this host's mirrors: named, as an operator would
        extra += ["--registry", host]
    with start_service(workers=2, extra_args=extra) as svc, svc.client() as c:
        print(f"env cache: {cache}")
        box = measure(c, layered_env(), args.rounds, args.pause)
        stats = httpx.get(f"{svc.url}/v1/environments/stats", timeout=30).json()
        lay = measure(c, layered_env(), args.rounds, args.pause, container=False)
        pre = measure(c, prefix_env(), args.rounds, args.pause)
        images = [p for p in (cache / "layers" / "mnt").iterdir() if len(p.name) == 32]
        root = next(p for p in images if (p / "app" / "hello.py").exists())
        fl = floor(root, args.rounds)
        no_pool = [*extra, "--warm-containers", "0"]  # (its shutdown unmounts the cache's images)
        with start_service(workers=2, extra_args=no_pool) as svc0, svc0.client() as c0:
            nopool = measure(c0, layered_env(), args.rounds, args.pause)
        print("\ncold build, per layer (layers):")
        for meta in sorted((cache / "layers" / "bases").glob("*/meta.json")):
            d = json.loads(meta.read_text())
            print(f"  {d['seconds']:7.2f} s  base {d['base']} (mmdebstrap + unpack)")
        metas = [
            json.loads(m.read_text()) for m in (cache / "layers" / "layers").glob("*/meta.json")
        ]
        for d in sorted(metas, key=lambda d: len(d["chain"])):
            print(f"  {d['seconds']:7.2f} s  {d['bytes'] / 1e6:8.2f} MB  {d['step'][:70]}")
        print(f"  layer cache: {stats}")
        print(
            f"  warm pool (container sessions): {stats['warm_hits']} of "
            f"{stats['warm_hits'] + stats['warm_misses']} starts found one ready"
        )
        cols = (("container", box), ("no warm pool", nopool), ("layers/bwrap", lay),
                ("prefix", pre))  # fmt: skip
        print(f"\n{'':34}" + "".join(f"{n:>14}" for n, _ in cols) + f"{'bwrap floor':>14}")
        print(
            f"{'cold: first session (build incl.)':34}"
            + "".join(f"{m['cold']:12.1f} s" for _, m in cols)
        )
        print(
            f"{'warm: requested -> first command':34}"
            + "".join(f"{_ms(m['start']):>14}" for _, m in cols)
            + f"{_ms(fl):>14}"
        )
        print(
            f"{'command round trip (exec true)':34}"
            + "".join(f"{_ms(m['trip']):>14}" for _, m in cols)
        )
        print(f"{'session delete':34}" + "".join(f"{_ms(m['end']):>14}" for _, m in cols))
        for name, m in cols[:3]:
            ratio = statistics.median(m["start"]) / statistics.median(fl)
            print(f"warm session start / floor ({name}): {ratio:.1f}x (goal: <= 1.5x)")
        top = max(metas, key=lambda d: len(d["chain"]))
        top_key = next(m.parent.name for m in (cache / "layers" / "layers").glob("*/meta.json")
                       if json.loads(m.read_text()) == top)  # fmt: skip
        fs = overlay_vs_fuse(cache, top_key)
        if fs:
            print("\nthe same layers in a user namespace: walk /usr, python3 -c pass")
            for name, walk, py in fs:
                print(f"  {name:18} {walk:6d} ms {py:6d} ms")
    if not args.cache:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
