"""Freed memory handed back to the operating system between phases and GRPO steps (glibc's ``malloc_trim``).

On CPU, PyTorch's freed tensor buffers stay in glibc's heap: after the text game's SFT (6 steps) the process held
9.4 GB with nothing alive, 1.1 GB after ``malloc_trim(0)`` (docs/results.md, 2026-12-04). The learning benchmark's
one process grew to 23 GB over SFT, its evaluation and GRPO, and the kernel killed it on a 24 GiB machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _trim():
    """Return glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Collect garbage and return the C heap's free pages to the operating system; return True when the heap was
    trimmed, False where the C library cannot (nothing is done there)."""
    gc.collect()
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True


def release_callback():
    """Return a transformers ``TrainerCallback`` that releases freed memory (:func:`release_freed_memory`) after
    every optimizer step: a GRPO step's rollouts, caches and loss batches are garbage by then (on cpu_smol's text game
    the resident set otherwise rose ~0.27 GB a step)."""
    from transformers import TrainerCallback

    class ReleaseFreedMemory(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            release_freed_memory()

    return ReleaseFreedMemory()
