"""Write the example data of examples/configs/sft.yaml and dpo.yaml from the quickstart's task
(dockyard.envs.expression: "<kind> of size <n>" -> a Python expression):

* ``sft_train.jsonl``: ``{"messages": [user, assistant]}``, every correct template of every
  training spec (no buggy ones: SFT on clean demonstrations);
* ``dpo_train.jsonl``: ``{"prompt": [user], "chosen": correct, "rejected": buggy}``, each buggy
  template of every training spec against a correct one;
* ``dpo_val.jsonl``: one such pair per held-out spec (pairs of kind and size never trained on).

Deterministic: ``python examples/data/make_expression_data.py`` rewrites the shipped files as
they are (tests/train/test_dpo.py checks that they are up to date).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dockyard.envs.expression import BUGGY, GOOD, load_tasks, prompt_text

HERE = Path(__file__).resolve().parent


def sft_examples(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "messages": [
                {"role": "user", "content": prompt_text(t)},
                {"role": "assistant", "content": good.format(n=t["size"])},
            ]
        }
        for t in tasks
        for good in GOOD[t["kind"]]
    ]


def pair(task: dict[str, Any], good: str, bad: str) -> dict[str, Any]:
    n = task["size"]
    return {
        "prompt": [{"role": "user", "content": prompt_text(task)}],
        "chosen": good.format(n=n),
        "rejected": bad.format(n=n),
    }


def dpo_pairs(tasks: list[dict[str, Any]], every_buggy: bool) -> list[dict[str, Any]]:
    out = []
    for t in tasks:
        good, bad = GOOD[t["kind"]], BUGGY[t["kind"]]
        rejected = bad if every_buggy else [bad[t["size"] % len(bad)]]
        out += [pair(t, good[(t["size"] + i) % len(good)], b) for i, b in enumerate(rejected)]
    return out


def files() -> dict[str, list[dict[str, Any]]]:
    """File name -> its records."""
    train, val = load_tasks("train"), load_tasks("val")
    return {
        "sft_train.jsonl": sft_examples(train),
        "dpo_train.jsonl": dpo_pairs(train, every_buggy=True),
        "dpo_val.jsonl": dpo_pairs(val, every_buggy=False),
    }


def render(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    for name, records in files().items():
        (HERE / name).write_text(render(records))
        print(f"{HERE / name}: {len(records)} records")
