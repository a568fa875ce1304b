"""A GRPO group's prompt read once, in its rollouts' first turn and in the loss's forward pass: the distinct prompts
go through the model once, their key/value cache is copied to every completion of the group.

TRL's transformers generation path passes each prompt ``num_generations`` times to ``generate``, which reads
(prefills) every copy: on cpu_smol's SQL step the 16 prompts of ~376 tokens are 6,000 prompt tokens, several times
the tokens the rollouts then generate (docs/results.md, benchmarks/grpo_step.py). Here the 4 distinct prompts are read
once, all but their last token, and the cache is repeated; ``generate`` then reads each copy's last token and samples
as before: same positions (from the attention mask, as ``generate`` computes them), same padding (the longest prompt
is among the distinct ones), same sampling. Only a batch of consecutive identical prompts takes this path (the first
turn; a tool turn's conversations differ and go TRL's way). vLLM caches prefixes itself and never comes here.

The loss reads the same prompts again, with gradients: 16 rows of prompt + completion a step, where the prompt is
most of the tokens (SQL: ~376 prompt tokens against a median episode of 95). :func:`shared_prompt_logits` runs the
distinct prompts of a micro-batch once (all but their last token) and the completions on top of the copied cache; the
gradient flows back through the copy into the shared prompt's pass, so the LoRA gradient is the one of the full
forward. Positions are what the model gives a forward without ``position_ids`` (TRL passes none): consecutive from
the row's first column, padding included, in both halves.
"""

from __future__ import annotations


def repeated_groups(prompt_ids: list[list[int]], n: int) -> bool:
    """Return True when ``prompt_ids`` is runs of ``n`` identical prompts (more than one copy each)."""
    if n < 2 or not prompt_ids or len(prompt_ids) % n:
        return False
    return all(prompt_ids[i] == prompt_ids[i - i % n] for i in range(len(prompt_ids)))


def left_pad(rows: list[list[int]], pad_id: int):
    """Return ``(input_ids, attention_mask)`` of ``rows`` left-padded with ``pad_id`` to the longest (as TRL pads)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask


def generate_shared(model, prompt_ids: list[list[int]], n: int, generation_config, pad_id: int, device):
    """Return the sequences (prompt + completion ids, one row per entry of ``prompt_ids``) ``model.generate`` samples
    for ``prompt_ids``, runs of ``n`` identical prompts (:func:`repeated_groups`), each distinct prompt prefilled once.
    Call it under ``torch.no_grad()``."""
    unique = prompt_ids[::n]
    ids, mask = left_pad(unique, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    if ids.size(1) < 2:  # nothing to share
        full, full_mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        return model.generate(input_ids=full, attention_mask=full_mask, generation_config=generation_config)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate derives them from the mask
    out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True,
                logits_to_keep=1)  # the prefill's logits are not used: skip the vocabulary projection
    cache = out.past_key_values
    if cache is None:  # the model keeps no cache (gradient checkpointing in training mode): read every copy
        return model.generate(input_ids=ids.repeat_interleave(n, 0), attention_mask=mask.repeat_interleave(n, 0),
                              generation_config=generation_config)
    cache.batch_repeat_interleave(n)
    return model.generate(input_ids=ids.repeat_interleave(n, 0), attention_mask=mask.repeat_interleave(n, 0),
                          past_key_values=cache, generation_config=generation_config)


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
    """Return the logits (rows x ``logits_to_keep`` x vocabulary) that predict the last ``logits_to_keep`` tokens of
    ``input_ids`` (prompt columns first, then the completion), as one forward pass over the whole rows gives them,
    each distinct prompt computed once; differentiable. None when no prompt repeats (nothing to share), the prompt
    is shorter than 2 columns, or the model keeps no cache in training (gradient checkpointing)."""
    import torch

    width = input_ids.size(1) - logits_to_keep
    if width < 2 or (model.training and _checkpointing(model)):
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
    return tail.logits[:, :-1, :]


def _checkpointing(model) -> bool:
    """Return whether gradient checkpointing is on anywhere in ``model`` (it turns the cache off in training)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
