"""Cross-tokenizer teachers (:mod:`dockyard.core.rl.cross_tokenizer`) against float64 references
written independently, by loops over characters and vocabularies: the alignment through the text,
BPM's longest-prefix vocabulary map and projection, and the three ways to combine teachers; then
the distillation loss on the combined target with the aligned-token mask."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dockyard.core.rl import (
    DistillationLoss,
    OnPolicyDistillationLoss,
    align_positions,
    combine_teachers,
    prefix_token_map,
    project_to_student,
)
from dockyard.core.rl.cross_tokenizer import LOG_FLOOR, char_starts, sampled_token_logprobs

TEXT = "def f(x): return x+12"
STUDENT = ["def", " f", "(x", "):", " return", " x", "+", "12"]
TEACHER = ["de", "f", " f(", "x", ")", ":", " ret", "urn", " x+", "1", "2"]


def test_positions_align_where_both_tokenizations_start_a_token_at_the_same_character() -> None:
    assert "".join(STUDENT) == TEXT == "".join(TEACHER)
    got = align_positions(char_starts(STUDENT), char_starts(TEACHER))
    # by hand: the character each token starts at, and the teacher token starting there
    s_start, pos = [], 0
    for p in STUDENT:
        s_start.append(pos)
        pos += len(p)
    t_start, pos = {}, 0
    for j, p in enumerate(TEACHER):
        if j >= 1:
            t_start.setdefault(pos, j)
        pos += len(p)
    want = [-1] + [t_start.get(c, -1) for c in s_start[1:]]
    assert got.tolist() == want
    # " f" starts where " f(" does; "(x" starts inside " f(", "+" inside " x+": unaligned
    assert got.tolist() == [-1, 2, -1, 4, 6, 8, -1, 9]


def test_opd_token_logprobs_chain_the_teacher_tokens_a_student_token_spans() -> None:
    """By hand on TEXT: log p_T(u_j) = −j, the projected log-probabilities −0.5."""
    teacher_lp = [-float(j) for j in range(len(TEACHER))]
    got, on = sampled_token_logprobs(char_starts(STUDENT), char_starts(TEACHER), len(TEXT),
                                     teacher_lp, [-0.5] * len(STUDENT))  # fmt: skip
    # "def": first token; " f" ends inside " f(": projected; "(x" starts inside " f(";
    # "):" = ")" + ":" (−4 − 5); " return" = " ret" + "urn" (−6 − 7); " x" inside " x+";
    # "+" starts inside " x+"; "12" = "1" + "2" (−9 − 10), at the text's end
    assert on.tolist() == [False, True, False, True, True, True, False, True]
    np.testing.assert_allclose(got[on], [-0.5, -9.0, -13.0, -0.5, -19.0], atol=1e-12)


def test_the_vocabulary_map_is_the_longest_student_prefix() -> None:
    student = ["a", "ab", "abc", "b", None, "c", "ab"]  # id 6 repeats "ab": the lower id wins
    teacher = ["abcd", "abx", "b", "zz", "", "c\ufffd", None, "ca"]
    got = prefix_token_map(teacher, student, fixed={3: 4})
    want = []
    for v in teacher:
        best, best_len = -1, 0
        for s, text in enumerate(student):
            ok = bool(v) and "\ufffd" not in (v or "") and text
            if ok and v.startswith(text) and len(text) > best_len:
                best, best_len = s, len(text)
        want.append(best)
    want[3] = 4  # fixed
    assert got.tolist() == want == [2, 1, 3, 4, -1, -1, -1, 5]


def _project_reference(logp: np.ndarray, m: np.ndarray, V: int) -> np.ndarray:
    out = np.zeros((*logp.shape[:-1], V))
    for idx in np.ndindex(*logp.shape[:-1]):
        mass = sum(math.exp(logp[idx][v]) for v in range(len(m)) if m[v] >= 0)
        for v in range(len(m)):
            if m[v] >= 0:
                out[idx][m[v]] += math.exp(logp[idx][v]) / mass
    return out


def test_projection_sums_the_mapped_mass_and_renormalises() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 3, 7))
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    m = np.array([0, 2, 2, -1, 4, 0, -1])
    got = project_to_student(logp, m, 5)
    np.testing.assert_allclose(got, _project_reference(logp, m, 5), atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)
    torch = pytest.importorskip("torch")
    t = project_to_student(torch.tensor(logp), m, 5)
    np.testing.assert_allclose(t.numpy(), got, atol=1e-12)


def _combine_reference(probs, aligned, weights, mode, scores):
    N = len(probs)
    B, T, V = probs[0].shape
    out = np.full((B, T, V), LOG_FLOOR)
    on = np.zeros((B, T), dtype=bool)
    floor = math.exp(LOG_FLOOR)
    for b in range(B):
        pick = None
        if mode == "select_teacher":
            post = [math.log(weights[k]) + scores[k][b] for k in range(N)]
            pick = post.index(max(post))
        for t in range(T):
            ks = [k for k in range(N) if aligned[k][b, t] and (pick is None or k == pick)]
            if not ks:
                continue
            on[b, t] = True
            wsum = sum(weights[k] for k in ks) if pick is None else 1.0
            w = {k: (weights[k] / wsum if pick is None else 1.0) for k in ks}
            if mode == "average_logits":
                z = [sum(w[k] * math.log(max(probs[k][b, t, v], floor)) for k in ks)
                     for v in range(V)]  # fmt: skip
                lz = math.log(sum(math.exp(x) for x in z))
                row = [x - lz for x in z]
            else:
                row = [math.log(max(sum(w[k] * probs[k][b, t, v] for k in ks), floor))
                       for v in range(V)]  # fmt: skip
            out[b, t] = [max(x, LOG_FLOOR) for x in row]
    return out, on


@pytest.mark.parametrize("mode", ["weighted_sum", "average_logits", "select_teacher"])
def test_combinations_match_a_float64_reference(mode: str) -> None:
    rng = np.random.default_rng(1)
    B, T, V = 3, 4, 6
    probs = []
    for k in range(3):
        p = rng.dirichlet(np.ones(V), size=(B, T))
        if k == 1:
            p[..., 2] = 0.0  # a student token teacher 1 gives no mass to
            p /= p.sum(-1, keepdims=True)
        probs.append(p)
    aligned = [rng.random((B, T)) > 0.3 for _ in range(3)]
    aligned[0][0, 0] = aligned[1][0, 0] = aligned[2][0, 0] = False  # nobody there
    weights = (1.0, 2.0, 0.5)
    scores = [rng.normal(size=B) for _ in range(3)]
    scores[2][1] = scores[0][1] + math.log(weights[0] / weights[2])  # a tie: the first wins
    got, on = combine_teachers(probs, aligned, weights, mode, scores)
    want, want_on = _combine_reference(probs, aligned, weights, mode, scores)
    np.testing.assert_array_equal(on, want_on)
    np.testing.assert_allclose(got, want, atol=1e-10)
    assert not on[0, 0]
    torch = pytest.importorskip("torch")
    tg, ton = combine_teachers([torch.tensor(p) for p in probs],
                               [torch.tensor(a) for a in aligned], weights, mode,
                               [torch.tensor(s) for s in scores])  # fmt: skip
    np.testing.assert_allclose(tg.numpy(), got, atol=1e-10)
    np.testing.assert_array_equal(ton.numpy(), on)


def test_one_teacher_everywhere_is_that_teacher() -> None:
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(5), size=(2, 3))
    on = np.ones((2, 3), dtype=bool)
    for mode in ("weighted_sum", "average_logits", "select_teacher"):
        got, _ = combine_teachers([p], [on], (3.0,), mode, [np.zeros(2)])
        np.testing.assert_allclose(got, np.log(p), atol=1e-10)


def test_bad_arguments_are_refused() -> None:
    p = np.full((1, 1, 2), 0.5)
    a = np.ones((1, 1), dtype=bool)
    with pytest.raises(ValueError, match="use one of weighted_sum"):
        combine_teachers([p], [a], (1.0,), "vote")
    with pytest.raises(ValueError, match="needs the teachers' scores"):
        combine_teachers([p], [a], (1.0,), "select_teacher")
    with pytest.raises(ValueError, match="must be > 0"):
        combine_teachers([p], [a], (0.0,))


def test_the_loss_counts_only_aligned_tokens_and_reports_their_fraction() -> None:
    """The combined log p̄'s top-k as the teacher's logits, ``teacher_mask`` from the
    alignment: the KL of the unaligned tokens is 0, the loss still divides by every loss
    token; forward KL against a float64 reference."""
    rng = np.random.default_rng(3)
    B, T, V, k = 2, 4, 6, 3
    zs = rng.normal(size=(B, T, V))
    p = rng.dirichlet(np.ones(V), size=(B, T))
    logs, _ = combine_teachers([p], [np.ones((B, T), dtype=bool)], (1.0,))
    idx = np.argsort(-logs, -1)[..., :k]
    vals = np.take_along_axis(logs, idx, -1)
    mask = np.array([[False, True, True, True], [False, True, True, False]])
    aligned = np.array([[True, True, False, True], [True, False, True, True]])
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=k))
    n = float(mask.sum())
    loss, m = fn(None, {"student_logits": zs, "teacher_topk_logits": vals,
                        "teacher_topk_indices": idx, "loss_mask": mask,
                        "teacher_mask": aligned, "num_loss_tokens": n})  # fmt: skip
    total = 0.0
    for b in range(B):
        for t in range(T):
            if not (mask[b, t] and aligned[b, t]):
                continue
            lse_s = math.log(sum(math.exp(x) for x in zs[b, t]))
            pt = [math.exp(v) for v in vals[b, t]]
            pt = [x / sum(pt) for x in pt]
            total += sum(pt[i] * (math.log(pt[i]) - (zs[b, t, idx[b, t, i]] - lse_s))
                         for i in range(k))  # fmt: skip
    assert float(loss) == pytest.approx(total / n, abs=1e-10)
    assert float(m["distill_aligned"]) == pytest.approx(3 / 5)
