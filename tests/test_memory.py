"""Freed memory goes back to the operating system (agentrl.core.memory), in a fresh interpreter of its own."""

import subprocess
import sys

import pytest

PROBE = r"""
import sys
sys.path.insert(0, "lib")
from agentrl.core.memory import release_freed_memory

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

blocks = [bytearray(4000) for _ in range(100_000)]   # ~400 MB of malloc'd blocks (above pymalloc's 512 bytes)
kept = blocks[::16]                                  # every 16th stays alive: the heap cannot shrink from its top
del blocks
before = rss_mb()
trimmed = release_freed_memory()
after = rss_mb()
print(trimmed, round(before), round(after), len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc are Linux's")
def test_releasing_freed_memory_returns_a_fragmented_heaps_free_pages_to_the_system():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    trimmed, before, after, kept = out.stdout.split()
    assert trimmed == "True" and int(kept) == 6250
    assert int(before) > 300  # the freed blocks are still the process's
    assert int(after) < int(before) / 2, out.stdout  # most of them are the system's again
