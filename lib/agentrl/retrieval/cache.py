"""The query-vector cache: least recently used query embeddings, bounded by entries and by bytes.

GRPO rolls out the same question many times and evaluation reruns repeat queries; encoding is ~95 % of a hybrid
query's time on CPU, so vectors of recent queries are kept. Two things keep its memory what its bound says:

- keys are 16-byte BLAKE2 digests of the query text, so a 2,000-character query costs what a short one does (a
  served index with a larger query limit would otherwise hold megabytes of query text);
- vectors live in one float32 block allocated at the first insert (``capacity x dim``, its pages touched as slots
  fill), not as one small array per query: thousands of small long-lived arrays scattered between the encoder's
  temporary buffers kept the allocator from reusing freed memory (docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np


class QueryVectorCache:
    """Thread-safe LRU of query vectors: at most ``max_entries`` of them and ``max_bytes`` of vector storage."""

    def __init__(self, max_entries: int = 20_000, max_bytes: int = 64 * 2**20):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # digest -> row of the block, oldest first
        self._block: np.ndarray | None = None
        self._free: list[int] = []
        self._lock = threading.Lock()

    @staticmethod
    def key(query: str) -> bytes:
        """Return the cache key of a query: a 16-byte digest of its UTF-8 text."""
        return hashlib.blake2b(query.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def nbytes(self) -> int:
        """Bytes held by the vector block (0 before the first insert)."""
        return 0 if self._block is None else self._block.nbytes

    def get_many(self, queries: list[str]) -> dict[str, np.ndarray]:
        """Return copies of the cached vectors of ``queries`` (those present), marking them recently used."""
        found = {}
        with self._lock:
            for q in dict.fromkeys(queries):
                k = self.key(q)
                slot = self._slots.get(k)
                if slot is not None:
                    self._slots.move_to_end(k)
                    found[q] = self._block[slot].copy()
        return found

    def put_many(self, queries: list[str], vectors: np.ndarray) -> None:
        """Store one vector per query, evicting the least recently used beyond the bounds."""
        vectors = np.asarray(vectors, dtype=np.float32)
        with self._lock:
            if self._block is None:
                dim = vectors.shape[1]
                capacity = min(self.max_entries, self.max_bytes // (4 * dim))
                if capacity <= 0:
                    return
                self._block = np.empty((capacity, dim), dtype=np.float32)
                self._free = list(range(capacity - 1, -1, -1))
            for q, v in zip(queries, vectors, strict=True):
                k = self.key(q)
                slot = self._slots.get(k)
                if slot is None:
                    if not self._free:
                        self._free.append(self._slots.popitem(last=False)[1])
                    slot = self._free.pop()
                self._slots[k] = slot
                self._slots.move_to_end(k)
                self._block[slot] = v
