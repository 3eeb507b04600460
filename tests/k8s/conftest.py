"""Fixtures for tests/k8s.

``slurm``: a real single-node Slurm cluster (Debian's slurm-wlm) started for a test, torn down after.

munged (own key and socket), slurmctld and slurmd run in the foreground as children of the
test, with a private slurm.conf (``SLURM_CONF``), state and spool directories under a temp dir
and free TCP ports, so nothing of the host's Slurm set-up (if any) is touched. Needs root
(slurmd runs jobs as their owner) and the packages ``slurmctld slurmd slurm-client munge``.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scontrol")
APT = "apt-get install -y slurmctld slurmd slurm-client munge"


def missing_reason() -> str | None:
    """Why a real Slurm cannot run here (None when it can)."""
    missing = [
        b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()
    ]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}): {APT}"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; run this test as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@contextmanager
def slurm_cluster(root: Path, cpus: int | None = None) -> Iterator[dict[str, str]]:
    """Start munge + slurmctld + slurmd; yield the environment (SLURM_CONF) to submit with."""
    host = socket.gethostname().split(".")[0]
    cpus = cpus or os.cpu_count() or 1
    for d in ("munge", "state", "spool", "log"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "munge.sock"
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=dockyardtest",
                # job IDs unique across test runs (ray.sub names its Ray folder and ports by them)
                f"FirstJobId={random.randrange(100_000, 60_000_000)}",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={sock}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "MpiDefault=none",
                "ReturnToService=2",
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
                f"PartitionName=debug Nodes={host} Default=YES MaxTime=30 State=UP",
                "",
            ]
        )
    )
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for name, argv in (
            (
                "munged",
                [_exe("munged"), "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                 f"--pid-file={root / 'munge' / 'munged.pid'}", f"--seed-file={root / 'munge' / 'seed'}",
                 f"--log-file={root / 'log' / 'munged.log'}"],
            ),
            ("slurmctld", [_exe("slurmctld"), "-D", "-i"]),
            ("slurmd", [_exe("slurmd"), "-D"]),
        ):  # fmt: skip
            log = open(root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - closed in finally
            logs.append(log)
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            if name == "munged":
                _wait(lambda: sock.exists(), 10, "munged did not create its socket", root)
        _wait(lambda: _node_idle(env), 30, "the Slurm node did not become idle", root)
        yield env
    finally:
        # end every job (all are ours: the cluster is private) before the daemons go
        subprocess.run(["scancel", "--full", "--partition=debug"], env=env, capture_output=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and procs and procs[-1].poll() is None:
            q = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
            if q.returncode != 0 or not q.stdout.strip():
                break
            time.sleep(0.5)
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def _node_idle(env: dict[str, str]) -> bool:
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip().startswith("idle")


def _wait(pred, timeout: float, message: str, root: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.25)
    tails = []
    for log in sorted((root / "log").glob("*")):
        tails.append(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
    raise RuntimeError(message + "\n" + "\n".join(tails))


def run_job(
    env: dict[str, str], script: Path, out: Path, job_env: dict[str, str], timeout: float
) -> tuple[str, str]:
    """sbatch ``script``, wait for it to finish; return (final state with exit code, output)."""
    sub = subprocess.run(
        ["sbatch", "--parsable", "-o", str(out), "-N", "1", "--exclusive", str(script)],
        env=env | job_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
        )
        if not q.stdout.strip():
            break
        time.sleep(1)
    else:
        subprocess.run(["scancel", job], env=env)
        raise TimeoutError(
            f"job {job} still running after {timeout}s:\n{out.read_text() if out.exists() else ''}"
        )
    info = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
    ).stdout
    state = " ".join(w for w in info.split() if w.startswith(("JobState=", "ExitCode=")))
    return state, out.read_text() if out.exists() else ""


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kuberay_crds(repo_root: Path) -> Path:
    """The reference KubeRay CRDs in ``../shared/k8s/kuberay-crds`` beside the repository."""
    path = repo_root.parent / "shared" / "k8s" / "kuberay-crds"
    if not path.is_dir():
        pytest.skip(
            f"KubeRay reference CRDs not found at {path} (they live beside the repository, in shared/)"
        )
    return path


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """SLURM_CONF etc. of a running single-node cluster; the venv's bin first on PATH."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("ray is not installed in this environment: pip install dockyard-train")
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        yield env


@pytest.fixture(scope="session")
def slurm_job():
    return run_job
