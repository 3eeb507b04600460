"""Overhead of dockyard.core's framework-neutral RL math vs hand-written torch.

GRPO advantages + the clipped policy-gradient loss (ε_low 0.2, ε_high 0.28, β 0.01 k3 KL,
token-mean), forward and backward, on a B × T token batch in torch float32. Both sides compute
the same numbers (checked before timing). Prints the median over ``--repeats`` runs and the
ratio core / hand-written (goal ≤ 1.1×).

    .venv/bin/python bench/core_loss.py                 # 256 × 2048 (the issue's size)
    .venv/bin/python bench/core_loss.py --batch 64 --seq 512 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dockyard.core.rl import clipped_pg_loss, compute_advantages

EPS_LOW, EPS_HIGH, BETA = 0.2, 0.28, 0.01


def hand_written(lp, prev, refl, rewards, mask, with_metrics=True):
    """The same math in plain torch, as one would write it inline in a trainer, with the
    metrics a trainer logs (clip fraction, approx KL to π_prev, mean ratio, mean KL to π_ref)."""
    P, G = rewards.shape
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    adv = (rewards - mean) / (std + 1e-6)
    adv = torch.where((rewards.amax(1, keepdim=True) > rewards.amin(1, keepdim=True)), adv, 0.0)
    adv = adv.reshape(P * G, 1)
    m = mask.to(lp.dtype)
    n = m.sum().clamp(min=1)
    log_ratio = torch.where(mask, lp - prev, 0.0).clamp(-20, 20)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv
    obj = torch.minimum(unclipped, clipped)
    x = torch.where(mask, refl - lp, 0.0).clamp(-20, 20)
    kl = torch.expm1(x) - x
    per_token = -obj + BETA * kl
    loss = (per_token * m).sum() / n
    if with_metrics:
        with torch.no_grad():
            r, lr = ratio.detach(), log_ratio.detach()
            _ = {
                "clip_fraction": (clipped < unclipped).sum() / n,
                "approx_kl": ((r - 1 - lr) * m).sum() / n,
                "ratio_mean": (r * m).sum() / n,
                "kl_ref": (kl.detach() * m).sum() / n,
            }
    return loss


def hand_written_loss_only(lp, prev, refl, rewards, mask):
    return hand_written(lp, prev, refl, rewards, mask, with_metrics=False)


def through_core(lp, prev, refl, rewards, mask):
    adv = compute_advantages(rewards, estimator="grpo").reshape(-1)
    loss, _ = clipped_pg_loss(
        lp,
        adv,
        mask,
        prev_logprobs=prev,
        ref_logprobs=refl,
        eps_low=EPS_LOW,
        eps_high=EPS_HIGH,
        kl_beta=BETA,
        kl_type="k3",
    )
    return loss


def make_batch(B: int, T: int, G: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, T, generator=g) * 3
    prev = lp + 0.1 * torch.randn(B, T, generator=g)
    refl = lp + 0.1 * torch.randn(B, T, generator=g)
    lens = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    rewards = torch.randint(0, 2, (B // G, G), generator=g).float()
    return lp, prev, refl, rewards, mask


def time_one(fn, batch, repeats: int) -> list[float]:
    lp0, prev, refl, rewards, mask = batch
    out = []
    for _ in range(repeats + 1):  # first run is warm-up
        lp = lp0.clone().requires_grad_()
        t0 = time.perf_counter()
        loss = fn(lp, prev, refl, rewards, mask)
        loss.backward()
        out.append(time.perf_counter() - t0)
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256, help="sequences B")
    ap.add_argument("--seq", type=int, default=2048, help="tokens per sequence T")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt G (B must divide)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    batch = make_batch(args.batch, args.seq, args.group)

    a = hand_written(*batch)
    b = through_core(*batch)
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a.item(), b.item())

    # interleave the implementations so background load hits them alike
    impls = {
        "hand-written, same metrics": hand_written,
        "hand-written, loss only": hand_written_loss_only,
        "dockyard.core.rl": through_core,
    }
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(args.repeats):
        for name, fn in impls.items():
            times[name] += time_one(fn, batch, 1)
    base = statistics.median(times["hand-written, same metrics"])
    print(
        f"advantages + clipped PG loss, forward + backward, torch {torch.__version__}, "
        f"{args.batch} × {args.seq} tokens, {torch.get_num_threads()} threads, median of {args.repeats}"
    )
    print(f"{'implementation':<30}{'median ms':>12}{'min ms':>10}{'ratio':>8}")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"{name:<30}{med * 1e3:>12.1f}{min(t) * 1e3:>10.1f}{med / base:>8.2f}")
    print("ratio: median time / median of 'hand-written, same metrics' (goal for core: <= 1.1)")


if __name__ == "__main__":
    main()
