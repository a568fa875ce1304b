"""Generation with the LoRA adapter merged into a copy of the base weights, restored exactly afterwards.

During a GRPO step's rollouts the policy runs token by token at small batch; with the adapter unmerged every
targeted linear layer also runs its two LoRA matmuls, a dropout and an add, which on a CPU costs about as much as the
base layer itself (cpu_smol's SQL step under cProfile: the LoRA layers' own forwards were 222 of the model's 573 s of
generation; docs/results.md). Merging removes that work. peft's own ``merge_adapter`` / ``unmerge_adapter`` adds and
then subtracts the delta in place, which leaves a rounding residue in the base weights at every step (in bf16 it
drifts the frozen model); here each merged weight is a new tensor and the original one is put back untouched, so
training sees bit-identical base weights. The price is one copy of the targeted weights while generating (about the
model's size on cpu_smol; :func:`merge_cost` says how much), which is why ``merge_for_generation = "auto"`` takes it
on the CPU only.
"""

from __future__ import annotations

import contextlib


def lora_layers(model) -> list:
    """Return the model's LoRA layers whose base weight is a plain floating-point tensor (a 4-bit or 8-bit base
    cannot take a merged copy), each active and unmerged."""
    from peft.tuners.lora import LoraLayer

    out = []
    for module in model.modules():
        if not isinstance(module, LoraLayer) or module.merged or module.disable_adapters:
            continue
        weight = getattr(module.get_base_layer(), "weight", None)
        if weight is None or type(weight).__name__ != "Parameter" or not weight.dtype.is_floating_point:
            continue
        out.append(module)
    return out


def mergeable(model) -> str | None:
    """Return why ``model``'s adapter cannot be merged for generation (no peft adapter, a quantized base, several
    adapters active), or None when it can."""
    if not hasattr(model, "peft_config") or not hasattr(model, "disable_adapter"):
        return "the model has no LoRA adapter"
    layers = lora_layers(model)
    if not layers:
        return "no LoRA layer over a plain floating-point weight (a quantized base cannot take a merged copy)"
    if any(len(m.active_adapters) != 1 for m in layers):
        return "more than one adapter is active"
    return None


def merge_cost(model) -> int:
    """Return the bytes the merged copies take while generating (the targeted base weights' size)."""
    return sum(m.get_base_layer().weight.numel() * m.get_base_layer().weight.element_size() for m in lora_layers(model))


@contextlib.contextmanager
def merged_for_generation(model):
    """Within the block, every LoRA layer of ``model`` computes ``base + delta`` in one matmul: its base weight is a
    new tensor ``W + B A * scaling`` and the adapter path is disabled; on leaving, the original weight tensors are put
    back (exactly: nothing is subtracted) and the adapter is enabled again. Call it under ``torch.no_grad()``;
    yields the number of merged layers."""
    import torch

    layers = lora_layers(model)
    saved = []
    try:
        with torch.no_grad():
            for module in layers:
                weight = module.get_base_layer().weight
                delta = module.get_delta_weight(module.active_adapters[0])
                saved.append((weight, weight.data))
                weight.data = weight.data + delta.to(weight.dtype)
        with model.disable_adapter():
            yield len(layers)
    finally:
        for weight, original in saved:
            weight.data = original
