"""agentrl's SFT trainer: TRL's ``SFTTrainer`` reading the prompt prefix its batch's demonstrations share once.

Every demonstration of an agent task starts with the same system prompt and tool schema (cpu_smol's SQL
demonstrations: ~300 of ~500 tokens), which carry no loss; TRL's forward reads them once per row. ``compute_loss``
has the model's decoder read that prefix once and copy its cache to every row
(agentrl.train.shared_prefill.prefix_read_once): the same loss and gradients up to float rounding (tested, without
LoRA dropout: with it the prefix draws one dropout mask for all rows instead of one each), TRL's loss (its chunked
cross-entropy by default) and token metrics unchanged. Where the batch is not a plain right-padded causal-LM batch
(padding-free position ids, images), TRL computes the loss itself (Liger, ``compute_loss_func``: DFT), the backend
is Unsloth's or gradient checkpointing keeps no cache, TRL's own forward runs.
"""

from __future__ import annotations

import contextlib
import functools

from agentrl.train.shared_prefill import keeps_cache, labelled_prefix, prefix_read_once
from agentrl.train.trainers import asked

PLAIN = frozenset({"input_ids", "attention_mask", "labels"})  # a right-padded causal-LM batch, nothing else


class AgentSFTTrainer:
    """The override (module docstring); combined with the SFTTrainer TRL exports (:func:`sft_trainer_class`). Reads
    ``share_prompt_prefill`` from ``self.agentrl_settings``."""

    agentrl_settings = None
    agentrl_backend = "transformers"
    _share: bool | None = None  # decided at the first loss (share_plan)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._share is None:
            self._share, line = sft_share_plan(self.agentrl_settings, self.args, self.compute_loss_func, model,
                                               self.agentrl_backend)
            if line:
                print(line)
        n, shared = 0, contextlib.nullcontext()
        if self._share and set(inputs) <= PLAIN and model.training:
            n = labelled_prefix(inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
        if n:
            rows, width = inputs["input_ids"].shape
            self._metrics["train"]["prompts/reused"].append(n * (rows - 1) / (rows * width))
            inner = self.accelerator.unwrap_model(model)  # DDP / FSDP wrap the PeftModel
            causal_lm = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
            shared = prefix_read_once(causal_lm, rows, width, n)
        with shared:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)


def sft_share_plan(settings, args, compute_loss_func, model, backend: str = "transformers"
                   ) -> tuple[bool, str | None]:
    """Return ``(share, line)``: whether SFT batches read their shared prompt prefix once (``share_prompt_prefill``:
    "auto" = on a CPU; never on the Unsloth backend, where TRL computes the loss itself or where the model keeps no
    cache in training) and the line that says a requested one is not done."""
    if not asked(settings, "share_prompt_prefill", args.use_cpu):
        return False, None
    why = None
    if backend == "unsloth":
        why = "the Unsloth backend computes it its own way"
    elif args.use_liger_kernel or compute_loss_func is not None:
        why = "TRL computes this loss itself (Liger or its loss function)"
    elif not keeps_cache(model):
        why = "gradient checkpointing keeps no cache"
    if why:
        return False, (f"share_prompt_prefill: not applied to SFT ({why})"
                       if settings.share_prompt_prefill == "on" else None)
    return True, None


@functools.cache
def sft_trainer_class(base: type) -> type:
    """Return AgentSFTTrainer over ``base``, the SFTTrainer TRL exports when training starts."""
    return type("AgentSFTTrainer", (AgentSFTTrainer, base), {"__module__": __name__,
                                                             "__doc__": AgentSFTTrainer.__doc__})
