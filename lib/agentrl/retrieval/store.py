"""Passage storage for an index: ``passages.jsonl`` plus a byte-offset array, read by memory map.

Only the passages a query returns are decoded, so a 21M-passage corpus costs one int64 per passage in
memory, not its text.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from agentrl.core.io import DataError, dumps

PASSAGES = "passages.jsonl"
OFFSETS = "passages.offsets.npy"


def write_passages(directory: str | Path, passages: Iterable[dict]) -> int:
    """Write passages and their offsets into ``directory``; return the count."""
    directory = Path(directory)
    offsets = [0]
    with (directory / PASSAGES).open("wb") as fh:
        for p in passages:
            fh.write((dumps(p) + "\n").encode("utf-8"))
            offsets.append(fh.tell())
    np.save(directory / OFFSETS, np.asarray(offsets, dtype=np.int64))
    return len(offsets) - 1


class PassageStore:
    """Random access to the passages of an index by position."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        path, off_path = directory / PASSAGES, directory / OFFSETS
        for p in (path, off_path):
            if not p.exists():
                raise DataError(f"{directory}: index file missing: {p.name}")
        self.offsets = np.load(off_path, mmap_mode="r")
        self._fh = path.open("rb")
        size = path.stat().st_size
        if int(self.offsets[-1]) != size:
            raise DataError(f"{directory}: {OFFSETS} does not match {PASSAGES} (rebuild the index)")
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict:
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        return json.loads(self._mm[start:end])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        """Release the memory map and file handle."""
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self._fh.close()
