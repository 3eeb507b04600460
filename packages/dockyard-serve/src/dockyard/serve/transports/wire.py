"""The wire format every transport shares: a bucket is one contiguous byte buffer plus a header.

A bucket ``{hf_name: array}`` is packed back to back (each tensor 64-byte aligned) into one
buffer of ``nbytes``; the header lists ``(name, dtype, shape, offset)`` per tensor, the policy
``version``, the bucket ``index`` and ``last``, and optionally a CRC-32 of the buffer. Unpacking
returns numpy views into the buffer (no copy).

``bfloat16`` arrays (``ml_dtypes.bfloat16``, what the JAX worker exports) travel by dtype name.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dockyard.core.interfaces import WeightSyncError

ALIGN = 64


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            # lazy: ml_dtypes is no dependency of dockyard-serve (torch/jax bring it), ~0.5 s
            import ml_dtypes  # registers the dtypes with numpy

            return np.dtype(getattr(ml_dtypes, name))
        raise


@dataclass
class Header:
    """What travels beside a bucket's bytes (JSON-serialisable via :meth:`to_json`)."""

    version: int
    index: int
    last: bool
    nbytes: int
    entries: list[tuple[str, str, list[int], int]] = field(default_factory=list)
    checksum: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "index": self.index,
            "last": self.last,
            "nbytes": self.nbytes,
            "entries": [list(e) for e in self.entries],
            "checksum": self.checksum,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Header:
        try:
            return cls(
                version=int(d["version"]),
                index=int(d["index"]),
                last=bool(d["last"]),
                nbytes=int(d["nbytes"]),
                entries=[
                    (str(n), str(t), [int(s) for s in shp], int(o)) for n, t, shp, o in d["entries"]
                ],
                checksum=None if d.get("checksum") is None else int(d["checksum"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightSyncError(f"malformed weight bucket header ({e!r}): {d!r:.200}") from e


def layout(tensors: dict[str, np.ndarray], version: int, index: int, last: bool) -> Header:
    """The header (offsets, total size) for packing ``tensors``; checksum left unset."""
    entries = []
    off = 0
    for name, arr in tensors.items():
        if not isinstance(arr, np.ndarray):
            raise TypeError(
                f"weight {name!r} is a {type(arr).__name__}; transports take numpy arrays "
                "(export with the policy worker's export_weights)"
            )
        off = (off + ALIGN - 1) // ALIGN * ALIGN
        entries.append((name, arr.dtype.name, list(arr.shape), off))
        off += arr.nbytes
    return Header(version=version, index=index, last=last, nbytes=off, entries=entries)


def pack_into(buf: memoryview | np.ndarray, tensors: dict[str, np.ndarray], header: Header) -> None:
    """Copy ``tensors`` into ``buf`` (at least ``header.nbytes`` bytes) at the header's offsets."""
    dst = np.frombuffer(buf, dtype=np.uint8, count=header.nbytes) if header.nbytes else None
    for (name, _, _, off), arr in zip(header.entries, tensors.values(), strict=True):
        if arr.nbytes == 0:
            continue
        assert dst is not None
        src = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        dst[off : off + arr.nbytes] = src
        del name


def unpack(buf: memoryview | np.ndarray | bytes, header: Header) -> dict[str, np.ndarray]:
    """Views of the tensors in ``buf`` (zero-copy; read-only when ``buf`` is)."""
    raw = (
        np.frombuffer(buf, dtype=np.uint8, count=header.nbytes)
        if header.nbytes
        else np.empty(0, np.uint8)
    )
    out: dict[str, np.ndarray] = {}
    for name, dt, shape, off in header.entries:
        dtype = _dtype(dt)
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = raw[off : off + count * dtype.itemsize].view(dtype).reshape(shape)
    return out


def checksum(buf: memoryview | np.ndarray | bytes, nbytes: int) -> int:
    """CRC-32 of the first ``nbytes`` bytes of ``buf``."""
    return zlib.crc32(memoryview(buf)[:nbytes]) if nbytes else 0


def verify(buf: memoryview | np.ndarray | bytes, header: Header, transport: str, peer: str) -> None:
    """Raise :class:`WeightSyncError` when the header carries a checksum the bytes do not match."""
    if header.checksum is None:
        return
    got = checksum(buf, header.nbytes)
    if got != header.checksum:
        raise WeightSyncError(
            f"{transport}: checksum mismatch in bucket {header.index} of version {header.version} "
            f"from {peer}: expected {header.checksum:#010x}, got {got:#010x}"
        )


def rebucket(
    buckets: Iterable[dict[str, np.ndarray]], bucket_bytes: int
) -> Iterator[dict[str, np.ndarray]]:
    """Split (never merge) buckets so each holds at most ``bucket_bytes`` (a single larger tensor
    forms its own bucket). Empty buckets are dropped."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    for bucket in buckets:
        cur: dict[str, np.ndarray] = {}
        size = 0
        for name, arr in bucket.items():
            if cur and size + arr.nbytes > bucket_bytes:
                yield cur
                cur, size = {}, 0
            cur[name] = arr
            size += arr.nbytes
        if cur:
            yield cur


def with_last(
    buckets: Iterable[dict[str, np.ndarray]],
) -> Iterator[tuple[int, bool, dict[str, np.ndarray]]]:
    """``(index, last, bucket)``: look one ahead so the final bucket is flagged. An update with
    no buckets yields one empty final bucket (so the receiver still sees the version)."""
    it = iter(buckets)
    try:
        cur = next(it)
    except StopIteration:
        yield 0, True, {}
        return
    i = 0
    for nxt in it:
        yield i, False, cur
        cur = nxt
        i += 1
    yield i, True, cur
