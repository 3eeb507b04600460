"""A vision-language policy end to end without Ray (issue 39 item 4): a tiny Qwen2-VL built
here, served by :class:`VLLMEngine` with image prompts over two turns that each keep their
screenshot, scored and trained by the torch worker with the images in the batch, its weights
pushed back through the shm transport; at every stage the trainer's logprobs are the engine's.
Needs torchvision beside the CPU torch (``./dev sync`` builds it: scripts/torchvision_cpu.sh).

One engine serves the module; the tests run in file order (the last one moves the engine to
policy version 1).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams

pytest.importorskip("vllm")
pytest.importorskip("torchvision", reason="./dev sync builds torchvision for the CPU torch")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

LOGPROB_TOL = 2e-3  # max |vLLM - torch| per token, float32 on CPU (measured ~5e-6)


class State:
    """What the ordered tests hand on: the two-turn trajectory the engine sampled."""

    ids: ClassVar[list[int]] = []
    policy: ClassVar[np.ndarray] = np.zeros(0, bool)
    logprobs: ClassVar[np.ndarray] = np.zeros(0, np.float32)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dockyard.serve.testing import tiny_vlm_dir

    return tiny_vlm_dir(tmp_path_factory.mktemp("vlm"))


@pytest.fixture(scope="module")
def loop():
    import gc

    lp = asyncio.new_event_loop()
    yield lp
    lp.close()
    gc.collect()


@pytest.fixture(scope="module")
def engine(loop, vlm: Path):
    from dockyard.serve.engines.vllm_engine import VLLMEngine

    eng = VLLMEngine(
        str(vlm),
        dtype="float32",
        max_model_len=2048,
        enforce_eager=True,
        seed=0,
        limit_mm_per_prompt={"image": 2, "video": 0},
    )
    loop.run_until_complete(eng.start())
    yield eng
    loop.run_until_complete(eng.aclose())


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 600))


def screenshot(seed: int, h: int, w: int) -> np.ndarray:
    """A random RGB image with a few solid blocks (something a vision tower can tell apart)."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    img[: h // 2, : w // 3] = rng.integers(0, 255, 3, dtype=np.uint8)
    return img


IMAGES = (screenshot(1, 64, 96), screenshot(2, 112, 84))


def torch_logprobs(vlm: Path, ids: list[int], images: list[np.ndarray]) -> np.ndarray:
    """Each token's logprob under transformers' Qwen2-VL forward, with the images' pixel
    values from the model's own image processor (what the trainer computes), renormalised
    without the vision tokens (which the engine never samples)."""
    import torch
    from transformers import AutoImageProcessor, Qwen2VLForConditionalGeneration

    model = Qwen2VLForConditionalGeneration.from_pretrained(vlm, dtype=torch.float32)
    feats = AutoImageProcessor.from_pretrained(vlm)(images=images, return_tensors="pt")
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(
            input_ids=x,
            pixel_values=feats["pixel_values"],
            image_grid_thw=feats["image_grid_thw"],
            mm_token_type_ids=(x == model.config.image_token_id).long(),
        ).logits[0]
    cfg = model.config
    banned = [cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id,
              cfg.vision_end_token_id]  # fmt: skip
    logits[:, banned] = float("-inf")
    lp = torch.log_softmax(logits[:-1].float(), -1).gather(-1, x[0, 1:, None])[:, 0]
    return np.concatenate([[0.0], lp.numpy()])


def test_two_turns_with_screenshots_match_the_trainer_forward(engine, loop, vlm: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(vlm)
    img1, img2 = IMAGES
    pad = tok.convert_tokens_to_ids("<|image_pad|>")

    def user(text: str) -> list[dict]:
        return [{"type": "image"}, {"type": "text", "text": text}]

    msgs = [{"role": "user", "content": user("click the button")}]

    def encode(messages: list[dict]) -> list[int]:
        return tok.encode(
            tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        )

    p1 = encode(msgs)
    assert p1.count(pad) == 1
    params = SamplingParams(n=2, max_tokens=6, temperature=1.0, seed=3)
    turn1 = run(loop, engine.generate(p1, params, images=[img1]))
    r1 = turn1[0]
    expanded1 = r1.prompt_token_ids.tolist()
    assert expanded1.count(pad) > 1  # the engine expanded the image into its patch tokens
    assert [t for t in expanded1 if t != pad] == [t for t in p1 if t != pad]
    assert all(r.prompt_token_ids.tolist() == expanded1 for r in turn1)
    # the engine never samples a vision token, and says so: every sample's allowed set lacks them
    assert r1.allowed is not None
    assert r1.allowed.rows.tolist() == [0] * len(r1.token_ids)
    one = type(r1.allowed)(r1.allowed.table, np.zeros(2, np.int32))
    assert one.allows(np.array([pad, r1.token_ids[0]])).tolist() == [False, True]

    # turn 2: the first turn's expanded context sent back, a second screenshot appended
    second = encode([{"role": "user", "content": user("now type 42")}])  # its own turn
    context = [*expanded1, *r1.token_ids.tolist(), *tok.encode("<|im_end|>\n"), *second]
    r2 = run(loop, engine.generate(context, SamplingParams(max_tokens=6, seed=4), [img1, img2]))[0]
    expanded2 = r2.prompt_token_ids.tolist()
    assert expanded2[: len(expanded1) + len(r1.token_ids)] == [*expanded1, *r1.token_ids.tolist()]

    # the trainer's view of the whole trajectory: both turns' sampled tokens scored at once
    ids = [*expanded2, *r2.token_ids.tolist()]
    lp = torch_logprobs(vlm, ids, [img1, img2])
    s1 = slice(len(expanded1), len(expanded1) + len(r1.token_ids))
    s2 = slice(len(expanded2), len(ids))
    err1 = np.abs(lp[s1] - r1.logprobs).max()
    err2 = np.abs(lp[s2] - r2.logprobs).max()
    assert err1 < LOGPROB_TOL, err1
    assert err2 < LOGPROB_TOL, err2
    # and the image matters: the same tokens without the screenshots score differently
    blank = [np.zeros_like(img1), np.zeros_like(img2)]
    assert np.abs(torch_logprobs(vlm, ids, blank)[s2] - r2.logprobs).max() > 10 * LOGPROB_TOL
    State.ids = ids
    State.policy = np.zeros(len(ids), bool)
    State.policy[s1] = State.policy[s2] = True
    State.logprobs = np.zeros(len(ids), np.float32)
    State.logprobs[s1], State.logprobs[s2] = r1.logprobs, r2.logprobs


def test_image_count_must_match_the_placeholders(engine, loop) -> None:
    params = SamplingParams(max_tokens=2)
    img = screenshot(0, 56, 56)
    token = engine.llm.model_config.hf_config.image_token_id
    with pytest.raises(ValueError, match="2 image\\(s\\) but the prompt has 1 image placeholder"):
        run(loop, engine.generate([5, token, 6], params, images=[img, img]))
    with pytest.raises(ValueError, match="0 image placeholder"):
        run(loop, engine.generate([5, 6], params, images=[img]))


def test_an_sft_demonstration_is_tokenised_as_the_rollout_and_the_engine_see_it(
    engine, loop, vlm: Path, tmp_path: Path
) -> None:
    """A two-turn demonstration with a screenshot per turn (the layout `dockyard osworld
    warmstart` writes): SFT's tokens are the rollout's (prompt, reply + EOS, the observation
    between) with each image expanded to exactly the tokens vLLM expands it to; only the
    replies carry the loss; and the worker learns from it, the images in the batch."""
    import base64
    import io

    from PIL import Image
    from transformers import AutoConfig, AutoTokenizer

    from dockyard.core.rl import MaskedNLLLoss
    from dockyard.torch.vision import ImageInputs
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.sft import collate, encode_example
    from dockyard.train.prompts import PromptRenderer

    tok = AutoTokenizer.from_pretrained(vlm)
    r = PromptRenderer(tok)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    img1, img2 = IMAGES

    def png(a: np.ndarray) -> str:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        return base64.b64encode(buf.getvalue()).decode()

    prompt = [{"role": "system", "content": "drive the desktop"},
              {"role": "user", "content": "click the button"}]  # fmt: skip
    convo = r.with_first_observation(prompt, "window Toy at (1, 20)", 1)
    reply1, reply2 = "pyautogui.click(51, 80)", "DONE"
    example = {
        "messages": [*convo, {"role": "assistant", "content": reply1},
                     *r.observation_messages("window Toy at (1, 20)", None, 1),
                     {"role": "assistant", "content": reply2}],
        "images": [png(img1), png(img2)],
    }  # fmt: skip
    vision = ImageInputs(str(vlm), AutoConfig.from_pretrained(vlm))
    enc = encode_example(r, example, vision)

    # the rollout's tokens of the same episode (one placeholder per image, as sent)
    eos = tok.eos_token_id
    p1 = r.prompt_ids(convo)
    obs = r.observation_ids(convo, reply1, "window Toy at (1, 20)", True, None, 1)
    rollout = [*p1, *r.encode(reply1), eos, *obs, *r.encode(reply2), eos]

    def compact(ids: list[int]) -> list[int]:
        return [t for i, t in enumerate(ids) if t != pad or i == 0 or ids[i - 1] != pad]

    assert compact(enc.ids) == rollout
    counts = vision.token_counts([img1, img2])
    assert enc.ids.count(pad) == sum(counts)
    assert min(counts) > 1
    # vLLM expands the second turn's context exactly as SFT did
    start2 = len(enc.ids) - len(r.encode(reply2)) - 1
    sent = compact(enc.ids[:start2])
    (gen,) = run(loop, engine.generate(sent, SamplingParams(max_tokens=1), [img1, img2]))
    assert gen.prompt_token_ids.tolist() == enc.ids[:start2]
    # the loss is on both replies and their EOS, nothing else
    masked = [t for t, m in zip(enc.ids, enc.mask, strict=True) if m]
    assert masked == [*r.encode(reply1), eos, *r.encode(reply2), eos]

    batch = collate([enc, enc])
    assert batch.images is not None
    assert len(batch.images) == 2
    assert all(np.array_equal(a, b) for a, b in zip(batch.images[0], [img1, img2], strict=True))
    worker = TorchPolicyWorker({"model_name": str(vlm), "precision": "float32",
                                "reference_policy": False, "optimizer": {"lr": 3e-3}})  # fmt: skip
    losses = [float(worker.train_step(batch, MaskedNLLLoss())["loss"]) for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses
    with pytest.raises(ValueError, match="vision-language model"):
        encode_example(r, example)  # images, but no image tokens to expand them to
    # the trained model's folder is one an engine serves images with: its image processor too
    out = Path(worker.export_hf(str(tmp_path / "sft")))
    assert ImageInputs(str(out), AutoConfig.from_pretrained(out)).token_counts([img1]) == counts[:1]


def trajectory_batch(
    ids: list[int], policy: np.ndarray, lp: np.ndarray, rows: list[tuple[int, int]], table: Any
) -> Any:
    """A GRPO batch of one group: for each ``(n, k)`` of ``rows`` the trajectory's first ``n``
    tokens with its first ``k`` images (rewards 1, 0, ...: non-zero advantages), sampled under
    the engine's allowed set ``table`` (the vision tokens left out)."""
    from dockyard.core.experience import AllowedTokens, Group, Trajectory
    from dockyard.train.batching import BatchOptions, build_batch

    def traj(n: int, k: int, reward: float) -> Trajectory:
        return Trajectory(
            prompt_id="p", token_ids=np.asarray(ids[:n]), policy_mask=policy[:n],
            gen_logprobs=lp[:n], policy_versions=np.where(policy[:n], 0, -1).astype(np.int32),
            rewards={"r": reward}, images=list(IMAGES[:k]),
            allowed=AllowedTokens(table, np.where(policy[:n], 0, -1).astype(np.int32)),
        )  # fmt: skip

    group = Group("p", [traj(n, k, float(i == 0)) for i, (n, k) in enumerate(rows)])
    return build_batch([group], BatchOptions())


@pytest.fixture(scope="module")
def worker(vlm: Path) -> Any:
    from dockyard.torch.worker import TorchPolicyWorker

    return TorchPolicyWorker(
        {"model_name": str(vlm), "precision": "float32", "reference_policy": False,
         "train_micro_batch_size": 2, "logprob_batch_size": 2, "optimizer": {"lr": 1e-2}}
    )  # fmt: skip


def test_the_torch_worker_scores_trains_and_pushes_the_image_trajectory(
    engine, loop, worker, tmp_path: Path
) -> None:
    from dockyard.core.rl import PolicyLoss
    from dockyard.serve.testing import shm_push
    from dockyard.torch.export import iter_hf_tensors

    assert State.ids, "runs after the two-turn test (file order)"
    table = engine._vision_ban()[1].table  # the set every sample was drawn from
    # the two-turn trajectory (two images) and its first turn alone (one image): padded rows
    # of different lengths and image counts
    first = int(np.flatnonzero(State.policy)[0])
    cut = first + int(np.argmin(State.policy[first:]))  # the end of the first turn's tokens
    batch = trajectory_batch(
        State.ids, State.policy, State.logprobs, [(len(State.ids), 2), (cut, 1)], table
    )
    assert batch.images is not None
    assert [len(r) for r in batch.images] == [2, 1]
    ours = worker.get_logprobs(batch)
    mask = batch.loss_mask
    np.testing.assert_allclose(ours[mask], batch.gen_logprobs[mask], atol=LOGPROB_TOL)

    visual = {k: v.detach().clone() for k, v in worker.model.named_parameters() if "visual" in k}
    batch.prev_logprobs = ours
    metrics = worker.train_step(batch, PolicyLoss())
    assert np.isfinite(metrics["loss"])
    moved = [k for k, v in worker.model.named_parameters() if "visual" in k
             and not torch_equal(v, visual[k])]  # fmt: skip
    assert moved, "the vision tower got no gradient"

    # the trained weights into the engine (HF names -> vLLM's), then the same two turns again
    weights = dict(iter_hf_tensors(worker.model))
    with shm_push(str(tmp_path / "vlm.sock"), [weights], 1) as rx:
        run(loop, engine.update_weights(rx, 1))
    context = State.ids[: int(np.flatnonzero(State.policy)[-1]) + 1]
    r = run(loop, engine.generate(context, SamplingParams(max_tokens=6, seed=9), list(IMAGES)))[0]
    assert np.all(r.policy_versions == 1)
    ids = [*r.prompt_token_ids.tolist(), *r.token_ids.tolist()]
    n = len(r.token_ids)
    policy = np.arange(len(ids)) >= len(ids) - n
    lp = np.zeros(len(ids), np.float32)
    lp[-n:] = r.logprobs
    after = worker.get_logprobs(trajectory_batch(ids, policy, lp, [(len(ids), 2)], table))
    np.testing.assert_allclose(after[0, -n:], r.logprobs, atol=LOGPROB_TOL)


def test_an_osworld_episode_shows_the_policy_its_screens(engine, loop, worker, vlm) -> None:
    """The rollout loop on a real sandboxed desktop: the first screen in the prompt, each
    turn's screenshot after it, all sent to the engine; the trajectory keeps them, and the
    trainer (same weights as the engine since the push) scores it as the engine did."""
    from transformers import AutoTokenizer

    from dockyard.envs.osworld.env import OSWorldEnvironment
    from dockyard.envs.osworld.toy import toy_tasks
    from dockyard.sandbox.launch import start_service
    from dockyard.train.batching import BatchOptions, build_batch
    from dockyard.train.rollout import rollout_group

    tok = AutoTokenizer.from_pretrained(vlm)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    params = SamplingParams(n=2, max_tokens=12, seed=5)
    with start_service(workers=1) as svc:
        env = OSWorldEnvironment(svc.url, token=svc.token, max_turns=2, settle_s=0.3,
                                 obs_size=(112, 84), screenshots=True)  # fmt: skip
        try:
            task = toy_tasks(1, seed=3)[0]
            group = run(loop, rollout_group(engine, env, tok, task, "u", params, max_turns=2))
        finally:
            run(loop, env.aclose())
    for t in group.trajectories:
        assert not t.infra_error, t.metadata
        assert len(t.images) == t.metadata["turns"] == 2  # the first screen, then turn 1's
        assert all(im.shape == (84, 112, 3) and im.dtype == np.uint8 for im in t.images)
        ids = t.token_ids.tolist()
        runs = sum(1 for i, x in enumerate(ids) if x == pad and (i == 0 or ids[i - 1] != pad))
        assert runs == 2
        assert ids.count(pad) > 2  # expanded: the trainer scores the engine's tokens
    batch = build_batch([group], BatchOptions())
    ours = worker.get_logprobs(batch)
    mask = np.zeros_like(batch.loss_mask)
    for i, t in enumerate(group.trajectories):
        mask[i, : len(t)] = t.policy_mask
    gen = np.concatenate([t.gen_logprobs[t.policy_mask] for t in group.trajectories])
    np.testing.assert_allclose(ours[mask], gen, atol=LOGPROB_TOL)


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b))
