"""Bounded capture of an untrusted stream: the first and last ``cap / 2`` bytes are kept.

Memory is O(cap) whatever the task prints (``yes``, one 10 GB line): the head fills once,
the tail is a ring of the most recent bytes.
"""

from __future__ import annotations


class HeadTail:
    def __init__(self, cap: int):
        self.cap = max(2, cap)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        half = self.cap // 2
        room = half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data[-(self.cap - half) :]
            excess = len(self._tail) - (self.cap - half)
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def text(self) -> str:
        if not self.truncated:
            return (self._head + self._tail).decode("utf-8", "replace")
        dropped = self.total - len(self._head) - len(self._tail)
        marker = f"\n[... dockyard-sandbox: {dropped} bytes omitted ...]\n".encode()
        return (self._head + marker + self._tail).decode("utf-8", "replace")
