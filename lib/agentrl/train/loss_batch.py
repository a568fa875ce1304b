"""A loss micro-batch without the rows and columns that cannot change the loss (``compact_loss_batch``).

TRL pads every micro-batch to the generation batch's longest prompt and completion, and under a token-normalised
loss agentrl zeroes the completion mask of the groups whose rewards were all equal (``skip_equal_groups``,
agentrl.train.trainers): those rows still cost a forward and a backward pass each, and on cpu_smol's SQL step after
SFT that is often half the step's rollouts (docs/results.md). Under the losses normalised by a token count that does
not depend on the micro-batch's rows (``dapo``, ``cispo``, ``vespo``: the generation batch's; ``bnpo``: the
micro-batch's loss tokens, which such rows do not have), a row without a loss token adds exactly 0 to the loss and
to every gradient, and a column of padding in every remaining row changes no other token's logits (it is masked,
and RoPE attention depends on relative positions only): :func:`compact` drops both. The per-row and per-sequence
losses (``grpo``, ``dr_grpo``, ``sapo``, ``luspo``) count rows in their normaliser and are left as TRL builds them.
"""

from __future__ import annotations

EXACT_LOSSES = ("dapo", "bnpo", "cispo", "vespo")  # losses a row without loss tokens adds nothing to
PROMPT = ("prompt_ids", "prompt_mask")
COMPLETION = ("completion_ids", "completion_mask", "tool_mask", "old_per_token_logps", "ref_per_token_logps",
              "sampling_per_token_logps", "importance_sampling_ratio")
ROW = ("advantages",)
WHOLE = ("num_items_in_batch",)  # the generation batch's token count: kept as it is


def compact(inputs: dict) -> tuple[dict, dict] | None:
    """Return ``(inputs, sizes)``: TRL's micro-batch ``inputs`` (agentrl.train.trainers) with the rows that have no
    loss token dropped (at least one row is kept, so TRL's loss and metrics run as they do on such a batch) and the
    prompt columns no kept row attends (left) and completion columns no kept row attends (right) cut, and
    ``{"rows": (before, after), "tokens": (before, after)}`` (token columns computed); None when the batch holds a
    key this does not know how to cut (images, token types), or there is nothing to drop."""
    keys = set(inputs)
    if not {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"} <= keys or (
            keys - set(PROMPT + COMPLETION + ROW + WHOLE)):
        return None
    completion_mask = inputs["completion_mask"]
    loss_mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
    tokens = loss_mask.sum(dim=1)
    keep = (tokens > 0).nonzero().flatten()
    if keep.numel() == 0:  # nothing to learn in this micro-batch: its cheapest row keeps TRL's bookkeeping as it is
        attended = inputs["prompt_mask"].sum(dim=1) + completion_mask.sum(dim=1)
        keep = attended.argmin().reshape(1)
    prompt_mask, completion_mask = inputs["prompt_mask"][keep], completion_mask[keep]
    attended_prompt = prompt_mask.any(dim=0).nonzero().flatten()
    attended_completion = completion_mask.any(dim=0).nonzero().flatten()
    start = int(attended_prompt[0]) if attended_prompt.numel() else 0
    end = int(attended_completion[-1]) + 1 if attended_completion.numel() else 1
    rows, width = inputs["prompt_ids"].shape[0], inputs["prompt_ids"].shape[1] + inputs["completion_ids"].shape[1]
    after = (keep.numel(), prompt_mask.shape[1] - start + end)
    if after == (rows, width):
        return None
    out = {}
    for key, value in inputs.items():
        if key in WHOLE or not hasattr(value, "dim") or value.dim() == 0:
            out[key] = value
            continue
        value = value[keep]
        if key in PROMPT:
            value = value[:, start:]
        elif key in COMPLETION and value.dim() >= 2 and value.shape[1] == inputs["completion_ids"].shape[1]:
            value = value[:, :end]
        out[key] = value
    return out, {"rows": (rows, after[0]), "tokens": (rows * width, after[0] * after[1])}
