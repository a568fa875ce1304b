"""Prompt tokens a GRPO step shares, read once: in every turn of the rollouts and in the loss's forward pass.

TRL's transformers generation path reads (prefills) every row's whole conversation at every turn: on cpu_smol's SQL
step the 16 rows of ~376 prompt tokens are 6,000 prompt tokens in the first turn and ~7,500 again in the turn after
the tool call, several times the tokens the rollouts generate (docs/results.md, benchmarks/grpo_step.py). Most of a
row is shared: the system prompt and the tool schema by every row, the whole prompt by a group's rollouts.

- Generation (:func:`generate_from_common_prefix`): the prefix all rows share is read once and its key/value cache
  copied to every row; each row's own tokens are left-padded *between* that prefix and themselves, masked out, and
  ``generate`` derives positions from the attention mask, so every row sees the tokens and positions of TRL's
  left-padded batch (greedy tokens identical, tested); where it is shorter than :data:`MIN_PREFIX` tokens TRL's
  own batch runs. vLLM caches prefixes itself and never comes here.
- The loss (:func:`shared_prompt_logits`): a micro-batch's distinct prompts once (all but their last token), the
  completions on top of the copied cache; the gradient flows back through the copy into the shared pass, so the
  LoRA gradient is the one of the full forward. Positions are what the model gives a forward without
  ``position_ids`` (TRL passes none): consecutive from the row's first column, padding included, in both halves.
"""

from __future__ import annotations


def left_pad(rows: list[list[int]], pad_id: int):
    """Return ``(input_ids, attention_mask)`` of ``rows`` left-padded with ``pad_id`` to the longest (TRL's pad)."""
    import torch
    from trl.trainer.utils import pad

    ids = [torch.tensor(r, dtype=torch.long) for r in rows]
    return (pad(ids, padding_value=pad_id, padding_side="left"),
            pad([torch.ones_like(t) for t in ids], padding_value=0, padding_side="left"))


MIN_PREFIX = 16  # a shorter common prefix is not worth a second forward call


def common_prefix(rows: list[list[int]]) -> int:
    """Return the length of the longest prefix every row shares, short of each row's last token (generate must read
    at least one token of every row itself)."""
    if not rows:
        return 0
    limit = min(len(r) for r in rows) - 1
    first = rows[0]
    n = 0
    while n < limit and all(r[n] == first[n] for r in rows):
        n += 1
    return n


def generate_from_common_prefix(model, prompt_ids: list[list[int]], generation_config, pad_id: int, device):
    """Return ``(sequences, width)``: what ``model.generate`` samples for ``prompt_ids`` with the prefix all rows
    share (the system prompt and tool schema; in a tool turn also nothing more, the conversations differ) read once,
    and the width of the input part of ``sequences``; None when the common prefix is shorter than
    :data:`MIN_PREFIX`. The rows' own tokens are left-padded between the shared prefix and themselves, masked out:
    positions come from the attention mask (as ``generate`` derives them), so every row sees the positions and
    tokens of TRL's left-padded batch. Call it under ``torch.no_grad()``."""
    import torch

    n = common_prefix(prompt_ids)
    if n < MIN_PREFIX:
        return None
    prefix = torch.tensor([prompt_ids[0][:n]], dtype=torch.long, device=device)
    out = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    if cache is None:  # no cache kept (gradient checkpointing in training mode)
        return None
    cache.batch_repeat_interleave(len(prompt_ids))
    rest, rest_mask = left_pad([r[n:] for r in prompt_ids], pad_id)
    ids = torch.cat([prefix.expand(len(prompt_ids), -1), rest.to(device)], dim=1)
    mask = torch.cat([torch.ones_like(ids[:, :n]), rest_mask.to(device)], dim=1)
    sequences = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache,
                               generation_config=generation_config)
    return sequences, ids.size(1)


def completions_until_eos(completion_ids, eos_ids: list[int]) -> list[list[int]]:
    """Return each row of ``completion_ids`` (a 2-D tensor) up to and including its first EOS token (the whole row
    when it has none), as TRL cuts its own generations."""
    import torch

    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device=completion_ids.device)
    found = is_eos.any(dim=1)
    eos_idx[found] = is_eos.int().argmax(dim=1)[found]
    keep = torch.arange(is_eos.size(1), device=completion_ids.device).expand(is_eos.size(0), -1) <= eos_idx[:, None]
    return [c[m].tolist() for c, m in zip(completion_ids.cpu(), keep.cpu(), strict=True)]


def prompt_groups(prompt_ids) -> tuple[list[int], list[int]]:
    """Return ``(first, inverse)`` for the rows of a 2-D ``prompt_ids`` tensor: the index of the first row of each
    distinct prompt, and for every row the position of its prompt in ``first``."""
    first, inverse, seen = [], [], {}
    for i, row in enumerate(prompt_ids.tolist()):
        key = tuple(row)
        if key not in seen:
            seen[key] = len(first)
            first.append(i)
        inverse.append(seen[key])
    return first, inverse


def shared_prompt_logits(model, input_ids, attention_mask, logits_to_keep: int):
    """Return ``(logits, distinct)``: the logits (rows x ``logits_to_keep`` x vocabulary) that predict the last
    ``logits_to_keep`` tokens of ``input_ids`` (prompt columns first, then the completion), as one forward pass over
    the whole rows gives them, each distinct prompt computed once (differentiable), and how many distinct prompts
    there were. None when no prompt repeats (nothing to share) or the prompt is shorter than 2 columns. The caller
    checks that the model keeps a cache in training (:func:`keeps_cache`)."""
    import torch

    width = input_ids.size(1) - logits_to_keep
    if width < 2:
        return None
    first, inverse = prompt_groups(torch.cat([input_ids[:, :width], attention_mask[:, :width]], dim=1))
    if len(first) == input_ids.size(0):
        return None
    rows = torch.tensor(first, device=input_ids.device)
    head = model(input_ids=input_ids[rows, :width - 1], attention_mask=attention_mask[rows, :width - 1],
                 use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    cache.batch_select_indices(torch.tensor(inverse, device=input_ids.device))
    tail = model(input_ids=input_ids[:, width - 1:], attention_mask=attention_mask, past_key_values=cache,
                 use_cache=True)
    return tail.logits[:, :-1, :], len(first)


def keeps_cache(model) -> bool:
    """Return whether ``model`` keeps a key/value cache in training: False when gradient checkpointing is on
    anywhere in it (it turns the cache off)."""
    return not any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
