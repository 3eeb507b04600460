"""Load an exported HF folder in vLLM (CPU) and print prompt logprobs as JSON.

Usage: ``python _vllm_check.py FOLDER IDS_JSON``; prints one JSON line prefixed ``RESULT``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    folder, prompts = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(
        model=folder,
        dtype="float32",
        gpu_memory_utilization=0.1,
        max_model_len=256,
        enforce_eager=True,
        seed=0,
    )
    params = SamplingParams(max_tokens=4, temperature=1.0, prompt_logprobs=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    result = []
    for prompt, out in zip(prompts, outs, strict=True):
        lps = [0.0] + [
            entry[tok].logprob
            for tok, entry in zip(prompt[1:], out.prompt_logprobs[1:], strict=True)
        ]
        result.append({"logprobs": lps, "generated": list(out.outputs[0].token_ids)})
    print("RESULT " + json.dumps(result), flush=True)
    llm.llm_engine.engine_core.shutdown()  # the engine's process ends now, not at teardown
    sys.stderr.flush()
    os._exit(0)  # an engine thread can abort the interpreter's teardown ("terminate called
    # without an active exception") after the results are out


if __name__ == "__main__":
    main()
