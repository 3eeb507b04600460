"""AllowedTokens: a grammar's allowed-token sets per position (xgrammar's bitmask layout),
deduplicated into a table, spliced across turns and padded into batches."""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.experience import AllowedTokens


def _bitmask(allowed: list[int], vocab: int) -> np.ndarray:
    words = np.zeros((vocab + 31) // 32, dtype=np.uint32)
    for t in allowed:
        words[t // 32] |= np.uint32(1 << (t % 32))
    return words.view(np.int32)


def test_from_bitmasks_keeps_each_positions_set_and_stores_each_set_once() -> None:
    vocab = 70  # three words; token 69 sits in the last one, bit 31 of word 0 is the sign bit
    sets = [[0, 31, 69], [5], [0, 31, 69], [32, 33]]
    a = AllowedTokens.from_bitmasks(np.stack([_bitmask(s, vocab) for s in sets]))
    assert a.table.shape == (3, 3)
    assert a.table.dtype == np.int32
    assert a.rows[0] == a.rows[2]
    assert len(set(a.rows.tolist())) == 3
    for pos, s in enumerate(sets):
        for tok in range(vocab):
            word = int(a.table[a.rows[pos], tok // 32]) & 0xFFFFFFFF
            assert bool((word >> (tok % 32)) & 1) == (tok in s), (pos, tok)
    ok = a.allows(np.array([69, 5, 31, 34]))
    assert ok.tolist() == [True, True, True, False]


def test_concat_offsets_each_pieces_rows_and_leaves_unconstrained_pieces_at_minus_one() -> None:
    vocab = 40
    first = AllowedTokens.from_bitmasks(np.stack([_bitmask([1], vocab), _bitmask([2], vocab)]))
    second = AllowedTokens.from_bitmasks(np.stack([_bitmask([3], vocab)]))
    whole = AllowedTokens.concat([(3, None), (2, first), (4, None), (1, second)])
    assert whole is not None
    assert whole.rows.shape == (10,)
    assert (whole.rows[[0, 1, 2, 5, 6, 7, 8]] == -1).all()
    tokens = np.array([9, 9, 9, 1, 2, 9, 9, 9, 9, 3])
    assert whole.allows(tokens).all()  # unconstrained positions allow anything
    assert not whole.allows(np.array([9, 9, 9, 2, 1, 9, 9, 9, 9, 1]))[[3, 4, 9]].any()
    assert AllowedTokens.concat([(3, None), (2, None)]) is None
    with pytest.raises(ValueError, match="does not fit"):
        AllowedTokens.concat([(3, first)])


def test_take_selects_batch_rows_and_shares_the_table() -> None:
    vocab = 40
    a = AllowedTokens.from_bitmasks(np.stack([_bitmask([1], vocab), _bitmask([2], vocab)]))
    batch = AllowedTokens(a.table, np.array([[0, 1, -1], [1, -1, -1], [-1, -1, 0]], np.int32))
    part = batch.take(np.array([2, 0]))
    assert part.table is a.table
    assert part.rows.tolist() == [[-1, -1, 0], [0, 1, -1]]
