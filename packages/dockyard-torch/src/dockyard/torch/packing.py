"""Micro-batch planning: fixed size, dynamic batching by token budget, and sequence packing.

All planners take the true lengths ``[B]`` of a right-padded batch and return a list of
micro-batches, each a list of sequence indices. The worker then either pads a micro-batch to
its longest member (``[b, T_mb]``) or packs it into one row (``[1, N]``, see :func:`pack_rows`).

* :func:`fixed_batches`: consecutive groups of ``size`` sequences.
* :func:`dynamic_batches`: sequences sorted by length (longest first) and cut greedily so that
  ``b · T_mb ≤ budget`` (padded tokens, T_mb the micro-batch's longest length).
* :func:`ffd_pack`: first-fit-decreasing bin packing — sequences by decreasing length, each into
  the first row whose total stays ``≤ budget`` (else a new row). FFD uses at most
  11/9·OPT + 6/9 rows (Dósa 2007). A sequence longer than the budget gets a row of its own.

A packed row concatenates its sequences; ``position_ids`` restart at 0 for each one, which is
how transformers (``masking_utils.find_packed_sequence_indices``; flash-attention's varlen path
on GPU) builds block-diagonal causal attention: no token attends across a sequence boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def fixed_batches(n: int, size: int) -> list[list[int]]:
    """``[[0..size-1], [size..2size-1], ...]`` over ``n`` sequences."""
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def dynamic_batches(lengths: Sequence[int] | np.ndarray, budget: int) -> list[list[int]]:
    """Length-sorted micro-batches with ``len(mb) · max_len(mb) ≤ budget`` padded tokens."""
    lengths = np.asarray(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = int(lengths[current[0]]) if current else int(lengths[i])
        if current and (len(current) + 1) * longest > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def ffd_pack(lengths: Sequence[int] | np.ndarray, budget: int) -> list[list[int]]:
    """First-fit-decreasing: rows of sequence indices whose lengths sum to ``≤ budget``."""
    if budget < 1:
        raise ValueError(f"packing token budget must be >= 1, got {budget}")
    lengths = np.asarray(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = int(lengths[i])
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(budget - n)
    return rows


@dataclass
class PackedRow:
    """One packed row of several sequences.

    Attributes:
        input_ids: ``[N] int64``, the sequences' real tokens concatenated.
        position_ids: ``[N] int64``, 0..L_j−1 for each sequence j.
        offsets: ``[n]`` start of each sequence in the row; ``lengths: [n]`` their lengths.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray


def pack_rows(input_ids: np.ndarray, lengths: np.ndarray, indices: Sequence[int]) -> PackedRow:
    """Concatenate the real tokens of ``input_ids[indices]`` (``[B, T]``, right-padded)."""
    lens = np.asarray([int(lengths[i]) for i in indices], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    ids = np.concatenate([input_ids[i, : lens[j]] for j, i in enumerate(indices)])
    pos = np.concatenate([np.arange(n, dtype=np.int64) for n in lens])
    return PackedRow(ids.astype(np.int64), pos, offsets, lens)


def sequence_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """``[B]`` lengths of right-padded rows (index of the last real token + 1)."""
    mask = np.asarray(attention_mask, dtype=bool)
    any_real = mask.any(axis=1)
    last = mask.shape[1] - np.argmax(mask[:, ::-1], axis=1)
    return np.where(any_real, last, 0).astype(np.int64)
