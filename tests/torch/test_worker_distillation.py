"""The torch worker's distillation path: a loss with ``teacher_topk`` gets the student's logits
aligned like the logprobs and the frozen teacher's top-k on the same tokens, per micro-batch;
the step does not depend on the micro-batching; ``loss_metrics`` is the same loss with no step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dockyard.core.experience import Batch  # noqa: E402
from dockyard.core.rl import DistillationLoss, OnPolicyDistillationLoss  # noqa: E402

K = 8


@pytest.fixture(scope="module")
def models() -> tuple[Path, Path]:
    """(student, teacher): two tiny models of one vocabulary, different weights."""
    from dockyard.torch.testing import build_tiny_model

    student = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, seed=0)
    teacher = build_tiny_model(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, seed=1)
    return student, teacher


def _worker(model: Path, teacher: Path | None = None, **over: Any) -> Any:
    from dockyard.torch.worker import TorchPolicyWorker

    cfg = {"model_name": str(model), "precision": "float32", "train_micro_batch_size": 8,
           "logprob_batch_size": 8, "reference_policy": False, "max_grad_norm": None,
           "teacher_model_name": None if teacher is None else str(teacher),
           "optimizer": {"lr": 1e-3, "weight_decay": 0.0}}  # fmt: skip
    return TorchPolicyWorker({**cfg, **over})


def _batch(seed: int = 0) -> Batch:
    """6 right-padded rows of different lengths, the loss on each row's last tokens."""
    rng = np.random.default_rng(seed)
    lengths = [9, 5, 12, 7, 12, 3]
    B, T = len(lengths), max(lengths)
    ids = np.zeros((B, T), dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(3, 1000, size=n)
        att[i, :n] = True
        lm[i, max(1, n - 4) : n] = True
    z = np.zeros((B, T), dtype=np.float32)
    return Batch(ids, att, lm, advantages=z, gen_logprobs=z)


class Recording:
    """The distillation loss, recording what each micro-batch handed it."""

    def __init__(self, k: int = K) -> None:
        self.inner = OnPolicyDistillationLoss(DistillationLoss(topk=k))
        self.seen: list[dict[str, np.ndarray]] = []

    @property
    def teacher_topk(self) -> int:
        return self.inner.teacher_topk

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        keep = ("student_logits", "teacher_topk_logits", "teacher_topk_indices", "loss_mask")
        row = {k: batch[k].detach().cpu().numpy() for k in keep}
        self.seen.append({**row, "logprobs": logprobs.detach().cpu().numpy()})
        return self.inner(logprobs, batch)


def test_the_loss_gets_aligned_student_logits_and_the_teachers_topk(models) -> None:
    student, teacher = models
    batch = _batch()
    loss = Recording()
    _worker(student, teacher, train_micro_batch_size=4).train_step(batch, loss)
    assert len(loss.seen) == 2  # micro-batches of 4 and 2 rows
    rows = [np.concatenate([s[k] for s in loss.seen]) for k in ("student_logits", "logprobs")]
    logits, lp = rows
    # position t of the student's logits is the distribution of token t (as the logprobs are)
    width = batch.input_ids.shape[1]
    log_q = torch.log_softmax(torch.as_tensor(logits), -1).numpy()
    picked = np.take_along_axis(log_q, batch.input_ids[:, :width, None], -1)[..., 0]
    valid = batch.attention_mask.copy()
    valid[:, 0] = False
    np.testing.assert_allclose(picked[valid], lp[valid], atol=1e-5)
    assert not logits[:, 0].any()
    assert not logits[~batch.attention_mask].any()  # 0 on padding
    # the teacher's top-k on the student's tokens: what the teacher's own worker gives
    want_v, want_j = _worker(teacher).get_topk_logits(batch, K)
    got_v = np.concatenate([s["teacher_topk_logits"] for s in loss.seen])
    got_j = np.concatenate([s["teacher_topk_indices"] for s in loss.seen])
    np.testing.assert_allclose(got_v, want_v, atol=1e-5)
    np.testing.assert_array_equal(got_j[valid], want_j[valid])


MODES = [
    {"train_micro_batch_size": 1},
    {"train_micro_batch_size": 4},
    {"dynamic_batching": {"enabled": True, "train_mb_tokens": 24}},
    {"sequence_packing": {"enabled": True, "train_mb_tokens": 24}},
]


@pytest.mark.parametrize("kl_type", ["forward", "reverse"])
def test_the_step_does_not_depend_on_the_micro_batching(models, kl_type: str) -> None:
    student, teacher = models
    batch = _batch(1)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=K, kl_type=kl_type))
    want = _worker(student, teacher).train_step(batch, fn)
    assert want["distill_kl"] > 0.0
    for mode in MODES:
        got = _worker(student, teacher, **mode).train_step(batch, fn)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5), mode
        assert got["distill_kl"] == pytest.approx(want["distill_kl"], rel=1e-5), mode
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4), mode


def test_loss_metrics_is_the_loss_without_a_step(models) -> None:
    student, teacher = models
    batch = _batch(2)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=K))
    w = _worker(student, teacher)
    before = w.loss_metrics(batch, fn)
    assert before == w.loss_metrics(batch, fn)  # no step taken
    assert w.step == 0
    first = w.train_step(batch, fn)
    assert before["distill_kl"] == pytest.approx(first["distill_kl"], rel=1e-5)
    assert before["num_loss_tokens"] == float(batch.loss_mask.sum())
    for _ in range(4):
        w.train_step(batch, fn)
    assert w.loss_metrics(batch, fn)["distill_kl"] < before["distill_kl"]  # the student moved


def test_a_student_equal_to_its_teacher_has_zero_kl_and_a_worker_without_one_refuses(
    models,
) -> None:
    student, _ = models
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=1024))  # the whole vocabulary
    m = _worker(student, student).loss_metrics(_batch(), fn)
    assert abs(m["distill_kl"]) < 1e-5
    with pytest.raises(RuntimeError, match="set teacher_model_name"):
        _worker(student).train_step(_batch(), fn)


@pytest.mark.slow
def test_two_fsdp_ranks_distil_as_one_process(models, tmp_path: Path) -> None:
    """The teacher is sharded like the student over 2 gloo ranks; rank 1's dummy micro-batch
    (5 rows, one per micro-batch) keeps its collectives in step; the held-out metrics and the
    step equal one process's."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from dockyard.torch.testing import random_batch

    student, teacher = models
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"precision": "float32", "train_micro_batch_size": 1, "logprob_batch_size": 1,
              "reference_policy": False, "max_grad_norm": None,
              "optimizer": {"lr": 1e-3, "weight_decay": 0.0}}  # fmt: skip
    job = Path(__file__).with_name("_distill_dist_job.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={port}", str(job), str(tmp_path), str(student), str(teacher),
           json.dumps(config)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    got = json.loads((tmp_path / "results.json").read_text())
    batch = random_batch(5, 16, seed=3)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=8))
    one = _worker(student, teacher, train_micro_batch_size=1)
    before = one.loss_metrics(batch, fn)
    step = one.train_step(batch, fn)
    assert got["before"]["distill_kl"] == pytest.approx(before["distill_kl"], rel=1e-5)
    assert got["step"]["loss"] == pytest.approx(step["loss"], rel=1e-5)
    assert got["step"]["grad_norm"] == pytest.approx(step["grad_norm"], rel=1e-4)
    assert got["step"]["num_loss_tokens"] == step["num_loss_tokens"]


# ------------------------------------------------ several teachers, other tokenizers, OPD
@pytest.fixture(scope="module")
def cross() -> tuple[Path, Path, Path]:
    """(student, teacher A, teacher B): tiny models whose tokenizers differ — byte-level BPE
    with 512, 768 and 1024 ids: the teachers merge more, so some student tokens start inside a
    teacher token (unaligned), and the two teachers' vocabularies differ from each other."""
    from dockyard.torch.testing import build_tiny_model

    kw: dict[str, Any] = {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1}
    return (build_tiny_model(**kw, seed=0, vocab_size=512),
            build_tiny_model(**kw, seed=1, vocab_size=768),
            build_tiny_model(**kw, seed=2, vocab_size=1024))  # fmt: skip


def _text_batch(student: Path) -> Batch:
    """Real text (code, prose, digits) in the student's tokens; the loss on all but 2 tokens."""
    from transformers import AutoTokenizer

    from dockyard.torch.testing import sample_texts

    tok = AutoTokenizer.from_pretrained(str(student))
    rows = [tok(t, add_special_tokens=False)["input_ids"][:40] for t in sample_texts()[:4]]
    B, T = len(rows), max(map(len, rows))
    ids = np.zeros((B, T), dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)], att[i, : len(r)], lm[i, 2 : len(r)] = r, True, True
    z = np.zeros((B, T), dtype=np.float32)
    return Batch(ids, att, lm, advantages=z, gen_logprobs=z)


def _teachers(*specs: tuple[Path, float]) -> list[dict[str, Any]]:
    return [{"model_name": str(p), "weight": w} for p, w in specs]


def test_one_teacher_of_the_students_vocabulary_as_a_list_is_the_one_teacher_path(models) -> None:
    student, teacher = models
    batch = _batch(3)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=K))
    want = _worker(student, teacher).train_step(batch, fn)
    got = _worker(student, teachers=_teachers((teacher, 2.0))).train_step(batch, fn)
    assert got["distill_kl"] == pytest.approx(want["distill_kl"], rel=1e-5)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
    assert got["distill_aligned"] == 1.0


def test_a_teacher_with_another_tokenizer_is_aligned_through_the_text(cross) -> None:
    """The worker's view of each teacher equals one computed here from the teacher's own
    tokenisation: at student token t starting where teacher token j does, the teacher's
    log-softmax before j, through BPM's map; ℓ_k: its log-likelihood of the response's text;
    both teachers leave some student tokens unaligned."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dockyard.core.rl import align_positions, project_to_student
    from dockyard.torch.teachers import sequence_starts

    student, a, b = cross
    batch = _text_batch(student)
    w = _worker(student, teachers=_teachers((a, 1.0), (b, 1.0)))
    ts = w.teacher_set
    assert all(t.tokenizer is not None for t in ts.teachers)
    lengths = batch.attention_mask.sum(1)
    idx = list(range(len(lengths)))
    probs, aligned, scores, tokens = ts.views(None, batch.input_ids, lengths, idx,
                                              batch.loss_mask, 512, torch.device("cpu"))  # fmt: skip
    s_tok = AutoTokenizer.from_pretrained(str(student))
    fractions = []
    for k, (folder, t) in enumerate(zip((a, b), ts.teachers, strict=True)):
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        tok = AutoTokenizer.from_pretrained(str(folder))
        for r in idx:
            text, s_starts = sequence_starts(s_tok, batch.input_ids[r, : lengths[r]].tolist())
            t_ids = tok(text, add_special_tokens=False)["input_ids"]
            _, t_starts = sequence_starts(tok, t_ids)
            j = align_positions(s_starts, t_starts)
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.tensor([t_ids])).logits[0].double(), -1)
            n = int(lengths[r])
            bounds = set(t_starts.tolist()) | {len(text)}
            for pos in range(n):
                assert bool(aligned[k][r, pos]) == (j[pos] >= 1)
                if j[pos] < 1:
                    assert not tokens[k][1][r, pos]
                    continue
                want = project_to_student(lp[j[pos] - 1].numpy(), t.token_map, 512)
                np.testing.assert_allclose(probs[k][r, pos].numpy(), want, atol=1e-5)
                # OPD's log π_T of the token's text: the chain over the teacher tokens it spans
                end = int(s_starts[pos + 1]) if pos + 1 < n else len(text)
                inside = [i for i, d in enumerate(t_starts) if s_starts[pos] <= d < end]
                y_lp, y_on = float(tokens[k][0][r, pos]), bool(tokens[k][1][r, pos])
                if end < 0:  # the next token starts inside a character: no end known
                    assert not y_on
                elif end in bounds:
                    assert y_on
                    chain = sum(float(lp[i - 1, t_ids[i]]) for i in inside)
                    assert y_lp == pytest.approx(chain, abs=1e-4)
                elif len(inside) == 1:
                    y = int(batch.input_ids[r, pos])
                    assert y_lp == pytest.approx(math.log(max(want[y], 1e-13)), abs=1e-4)
                else:
                    assert not y_on
            resp = t_starts >= s_starts[2]
            want_score = float(sum(lp[i - 1, t_ids[i]] for i in np.nonzero(resp)[0] if i >= 1))
            assert float(scores[k][r]) == pytest.approx(want_score, abs=1e-3)
        valid = batch.loss_mask
        fractions.append(float(aligned[k].numpy()[valid].mean()))
    # unaligned: student tokens inside a teacher's longer merges, and inside a character (the
    # partial UTF-8 bytes of "Ünïcödé, 東京, 🚀")
    assert all(0.3 < f < 1.0 for f in fractions), fractions


@pytest.mark.parametrize("mode", ["weighted_sum", "average_logits", "select_teacher"])
def test_two_teachers_with_other_tokenizers_distil(cross, mode: str) -> None:
    """A few steps on one batch lower the KL to the combined target, whatever the combination;
    the aligned fraction of the loss tokens is reported."""
    student, a, b = cross
    batch = _text_batch(student)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=16))
    w = _worker(student, teachers=_teachers((a, 1.0), (b, 3.0)),
                teacher_combination=mode, optimizer={"lr": 3e-3, "weight_decay": 0.0})  # fmt: skip
    before = w.loss_metrics(batch, fn)
    assert 0.5 < before["distill_aligned"] < 1.0
    for _ in range(5):
        w.train_step(batch, fn)
    after = w.loss_metrics(batch, fn)
    assert after["distill_kl"] < 0.8 * before["distill_kl"], (before, after)


def test_opd_gets_each_teachers_logprobs_of_the_sampled_tokens(models, cross) -> None:
    """A same-vocabulary teacher's log π_T(y_t) are its own worker's logprobs; a cross-tokenizer
    teacher scores the aligned tokens only; the OPD step trains (the student moves toward the
    teachers: its mean teacher-minus-student gap shrinks)."""
    from dockyard.core.rl import OPDPolicyLoss, PolicyLoss

    student, teacher = models
    batch = _batch(4)

    class Seen(OPDPolicyLoss):
        def __call__(self, logprobs: Any, batch: Mapping[str, Any]):
            SEEN.append({k: batch[k].detach().numpy() for k in
                         ("teacher_logprobs", "teacher_logprob_mask")})  # fmt: skip
            return super().__call__(logprobs, batch)

    SEEN: list[dict[str, np.ndarray]] = []
    fn = Seen(PolicyLoss("clipped_pg", {"agg": "token-mean"}), (1.0, 1.0))
    w = _worker(student, teachers=_teachers((teacher, 1.0), (student, 1.0)))
    w.train_step(batch, fn)
    lp, on = (np.concatenate([s[k] for s in SEEN], axis=1)
              for k in ("teacher_logprobs", "teacher_logprob_mask"))  # fmt: skip
    valid = batch.attention_mask.copy()
    valid[:, 0] = False
    want = _worker(teacher).get_logprobs(batch)
    np.testing.assert_allclose(lp[0][valid], want[valid], atol=1e-5)
    assert on[:, valid].all()
    with pytest.raises(RuntimeError, match="needs 2 teachers' log-probabilities"):
        _worker(student).train_step(batch, fn)

    s512, a, b = cross
    text = _text_batch(s512)
    opd = OPDPolicyLoss(PolicyLoss("clipped_pg", {"agg": "token-mean"}), (1.0, 1.0))
    w = _worker(s512, teachers=_teachers((a, 1.0), (b, 1.0)),
                optimizer={"lr": 3e-3, "weight_decay": 0.0})  # fmt: skip
    first = last = w.train_step(text, opd)
    for _ in range(4):
        last = w.train_step(text, opd)
    assert last["opd/reverse_kl"] < first["opd/reverse_kl"], (first, last)
