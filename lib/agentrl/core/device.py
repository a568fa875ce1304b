"""What the CUDA device computes natively, for every path that picks a dtype (training, merging, inference).

``torch.cuda.is_bf16_supported()`` answers True on a T4 (compute capability 7.5): bfloat16 tensors are created by
emulation there, slowly. These functions answer whether the GPU has bfloat16 in hardware (compute capability >= 8.0:
A100, L4, H100), which is what the choice between bf16 and fp16 (with a loss scaler) needs. Heavy imports inside the
functions; nothing here runs at import time.
"""

from __future__ import annotations


def cuda_native_bf16() -> bool:
    """Return True when a usable CUDA GPU computes bfloat16 natively (compute capability >= 8.0, or a ROCm GPU);
    False without CUDA and on T4-class cards (SM 7.5), where bf16 is only emulated."""
    import torch

    if not torch.cuda.is_available():
        return False
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability()[0] >= 8


def cuda_half_dtype():
    """Return the 16-bit dtype for CUDA work: torch.bfloat16 where the GPU has it natively, else torch.float16."""
    import torch

    return torch.bfloat16 if cuda_native_bf16() else torch.float16


def cuda_dtype(requested: str, log=None):
    """Return the torch dtype for loading a model on CUDA: ``auto`` gives :func:`cuda_half_dtype`; an explicit
    ``bfloat16`` on a GPU without native bf16 gives float16, with one warning on ``log`` saying so."""
    import torch

    if requested in ("auto", None):
        return cuda_half_dtype()
    dtype = getattr(torch, requested)
    if dtype is torch.bfloat16 and not cuda_native_bf16():
        major, minor = torch.cuda.get_device_capability()
        if log is not None:
            log.warning("dtype bfloat16 asked for, but this GPU (compute capability %d.%d) has no native bfloat16: "
                        "using float16 (training: fp16 with a loss scaler)", major, minor)
        return torch.float16
    return dtype
