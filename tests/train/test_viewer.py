"""`dockyard view`'s server without a browser: runs found under a parent folder, the API's
filters, nothing a request names becomes a path, the page's scripts come from the server only
(CSP), loopback unless told. (The page in a real browser: tests/integration/test_viewer_browser.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dockyard.core.config import RolloutLogConfig
from dockyard.core.experience import Group, Trajectory
from dockyard.train.cli import main
from dockyard.train.rollouts import RolloutLog
from dockyard.train.view.server import check_host, create_app


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/demo/logs: two steps of 2 groups × 2 samples (rewards 0, 1, 2, 3 by position)."""
    from dockyard.torch.testing import build_tokenizer

    root = tmp_path_factory.mktemp("results")
    logs = root / "demo" / "logs"
    log = RolloutLog(RolloutLogConfig(), logs, str(build_tokenizer()), env="expression")
    for step in (1, 2):
        groups = []
        for gi in range(2):
            trajs = []
            for si in range(2):
                meta = {"task_id": f"t{gi}", "verdict": "passed" if si else "failed"}
                if (gi, si) == (1, 1):
                    meta["tests_tampered"] = True
                    meta["stdout"] = "needle in the verifier"
                trajs.append(_traj(f"u{gi}", float(2 * gi + si), meta))
            groups.append(Group(f"u{gi}", trajs))
        log.write_step(step, groups)
    (logs / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/mean": 0.5 * s}) + "\n" for s in (1, 2))
    )
    return root


def _traj(uid: str, reward: float, meta: dict) -> Trajectory:
    mask = np.array([False] * 3 + [True] * 4)
    return Trajectory(uid, np.arange(40, 47), mask, np.where(mask, -0.1, 0).astype(np.float32),
                      np.where(mask, 0, -1).astype(np.int32), {"reward/tests": reward},
                      metadata=meta)  # fmt: skip


@pytest.fixture(scope="module")
def client(run_dir: Path) -> TestClient:
    return TestClient(create_app([run_dir]))


def test_runs_are_found_under_a_parent_folder(client: TestClient, run_dir: Path) -> None:
    (run,) = client.get("/api/runs").json()
    assert Path(run["path"]) == run_dir / "demo" / "logs"
    assert run["keys"] == ["step_000001", "step_000002"]
    assert [r["reward/mean"] for r in client.get("/api/runs/0/metrics").json()] == [0.5, 1.0]


def test_filters(client: TestClient) -> None:
    def rows(**q) -> list[tuple[int, int]]:
        eps = client.get("/api/runs/0/steps/step_000001", params=q).json()
        return [(e["group"], e["sample"]) for e in eps]

    assert rows() == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert rows(min_reward=1, max_reward=2) == [(0, 1), (1, 0)]
    assert rows(verdict="failed") == [(0, 0), (1, 0)]
    assert rows(flag="any") == [(1, 1)]
    assert rows(flag="tests_tampered", infra="none") == [(1, 1)]
    assert rows(infra="only") == []
    assert rows(q="NEEDLE") == [(1, 1)]
    assert rows(task_id="t0") == [(0, 0), (0, 1)]
    assert rows(env="other") == []
    ep = client.get("/api/runs/0/steps/step_000001/3").json()
    assert ep["verifier_stdout"] == "needle in the verifier"
    assert len(ep["token_texts"]) == len(ep["gen_logprobs"]) == 7


def test_requests_name_no_paths(client: TestClient) -> None:
    for url in (
        "/api/runs/0/steps/..%2F..%2Fmetrics",
        "/api/runs/0/steps/step_000009",
        "/api/runs/5/metrics",
        "/api/runs/0/steps/step_000001/99",
        "/static/../data.py",
    ):
        assert client.get(url).status_code == 404, url


def test_the_page_and_its_assets_are_served_with_a_strict_csp(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "script-src 'self';" in page.headers["content-security-policy"]
    for src in ("vendor/uplot/uPlot.iife.min.js", "vendor/gridjs/gridjs.umd.js",
                "vendor/diff2html/diff2html.min.js", "app.js"):  # fmt: skip
        assert f'src="/static/{src}"' in page.text
        assert client.get(f"/static/{src}").status_code == 200
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere


def test_loopback_only_unless_told(run_dir: Path, capsys) -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        check_host(host, allow_remote=False)
    with pytest.raises(ValueError, match="--allow-remote"):
        check_host("0.0.0.0", allow_remote=False)
    check_host("0.0.0.0", allow_remote=True)
    assert main(["view", str(run_dir), "--host", "0.0.0.0"]) == 2
    assert "SSH tunnel" in capsys.readouterr().out
    assert main(["view", str(run_dir / "nothing-here")]) == 2
    assert "no such folder" in capsys.readouterr().out
