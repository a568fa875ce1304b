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
- SFT's loss (:func:`labelled_prefix`, :func:`prefix_read_once`): the right-padded demonstrations of a batch share
  their system prompt and tool schema up to the first token that carries loss; the decoder reads that prefix once
  and copies its cache to every row, each row's remaining tokens read on top at the positions the one-pass forward
  gives, and hands back the full batch's hidden states (TRL's loss, chunked or not, runs on them unchanged).
- GRPO's loss (:func:`shared_prompt_logits`): whichever reads fewer tokens of two ways, the gradient flowing back
  through the copied cache into the shared pass (so the LoRA gradient is the one of the full forward): each distinct
  prompt of a micro-batch once (all but its last token), the completions on top of its copied cache, at the
  positions a forward without ``position_ids`` gives (TRL passes none: consecutive from the row's first column,
  padding included); or the prefix every row's prompt shares (system prompt and tool schema) once and each row's own
  tokens left-padded after it, at positions from the attention mask as in generation. RoPE attention depends on
  relative positions only, so both equal the one-pass forward up to float rounding (tested).
"""

from __future__ import annotations

import contextlib


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


def generate_from_common_prefix(model, prompt_ids: list[list[int]], generation_config, pad_id: int, device,
                                cache=None):
    """Return ``(sequences, width, mask, cache)``: what ``model.generate`` samples for ``prompt_ids`` with the prefix
    all rows share (the system prompt and tool schema) read once, the width of the input part of ``sequences``, its
    attention mask and the cache ``generate`` filled; None when the common prefix is shorter than :data:`MIN_PREFIX`.
    ``cache``: the empty cache to fill (agentrl.rollout.decode.growing_cache), else the model's own. The rows' own
    tokens are left-padded between the shared prefix and themselves, masked out: positions come from the attention
    mask (as ``generate`` derives them), so every row sees the positions and tokens of TRL's left-padded batch. Call
    it under ``torch.no_grad()``."""
    import torch

    n = common_prefix(prompt_ids)
    if n < MIN_PREFIX:
        return None
    prefix = torch.tensor([prompt_ids[0][:n]], dtype=torch.long, device=device)
    out = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, logits_to_keep=1,
                **({} if cache is None else {"past_key_values": cache}))
    cache = out.past_key_values
    if cache is None:  # no cache kept (gradient checkpointing in training mode)
        return None
    cache.batch_repeat_interleave(len(prompt_ids))
    rest, rest_mask = left_pad([r[n:] for r in prompt_ids], pad_id)
    ids = torch.cat([prefix.expand(len(prompt_ids), -1), rest.to(device)], dim=1)
    mask = torch.cat([torch.ones_like(ids[:, :n]), rest_mask.to(device)], dim=1)
    sequences = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache,
                               generation_config=generation_config)
    return sequences, ids.size(1), mask, cache


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


def _first_real(attention_mask, width: int) -> list[int]:
    """Return each row's first attended column among the first ``width`` (its left padding's length)."""
    return attention_mask[:, :width].int().argmax(dim=1).tolist()


def shared_prompt_logits(model, input_ids, attention_mask, logits_to_keep: int):
    """Return ``(logits, saved)``: the logits (rows x ``logits_to_keep`` x vocabulary) that predict the last
    ``logits_to_keep`` tokens of ``input_ids`` (prompt columns first, left-padded, then the completion), as one
    forward pass over the whole rows gives them up to float rounding, with the shared prompt tokens read once
    (differentiable; the cheaper of the two ways in the module docstring), and the share of the prompt columns the
    one pass computes that were not computed. None when neither way reads fewer tokens than the one pass, or the
    prompt is shorter than 2 columns. The caller checks that the model keeps a cache in training
    (:func:`keeps_cache`)."""
    import torch

    width = input_ids.size(1) - logits_to_keep
    if width < 2:
        return None
    rows = input_ids.size(0)
    starts = _first_real(attention_mask, width)
    first, inverse = prompt_groups(torch.cat([input_ids[:, :width], attention_mask[:, :width]], dim=1))
    by_prompt = len(first) * (width - 1)  # tokens computed each way, completions aside
    n = common_prefix([input_ids[r, s:width].tolist() for r, s in enumerate(starts)])
    rest = max(width - s - n for s in starts)
    by_prefix = n + rows * rest if n >= MIN_PREFIX else rows * width
    if min(by_prompt, by_prefix) >= rows * (width - 1):
        return None
    if by_prefix < by_prompt:
        logits = _prefix_logits(model, input_ids, attention_mask, logits_to_keep, starts, n, rest)
        return logits, 1 - by_prefix / (rows * width)
    index = torch.tensor(first, device=input_ids.device)
    head = model(input_ids=input_ids[index, :width - 1], attention_mask=attention_mask[index, :width - 1],
                 use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    cache.batch_select_indices(torch.tensor(inverse, device=input_ids.device))
    tail = model(input_ids=input_ids[:, width - 1:], attention_mask=attention_mask, past_key_values=cache,
                 use_cache=True)
    return tail.logits[:, :-1, :], 1 - by_prompt / (rows * width)


def _prefix_logits(model, input_ids, attention_mask, logits_to_keep: int, starts: list[int], n: int, rest: int):
    """Return the completion logits with the ``n`` prompt tokens every row shares read once: each row's remaining
    prompt tokens are left-padded to ``rest`` columns after the shared prefix, masked out, and every token is placed
    at its position among the row's attended tokens (as generation places them)."""
    import torch

    width = input_ids.size(1) - logits_to_keep
    r0 = starts[0]
    prefix = input_ids[:1, r0:r0 + n]
    head = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    rows = input_ids.size(0)
    cache.batch_repeat_interleave(rows)
    tail_ids = input_ids.new_zeros(rows, rest + logits_to_keep)
    tail_mask = attention_mask.new_zeros(rows, rest + logits_to_keep)
    for r, s in enumerate(starts):
        own = width - s - n  # this row's prompt tokens after the shared prefix, right-aligned in the rest columns
        tail_ids[r, rest - own:rest] = input_ids[r, s + n:width]
        tail_mask[r, rest - own:rest] = 1
    tail_ids[:, rest:] = input_ids[:, width:]
    tail_mask[:, rest:] = attention_mask[:, width:]
    mask = torch.cat([tail_mask.new_ones(rows, n), tail_mask], dim=1)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)[:, n:]
    tail = model(input_ids=tail_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                 use_cache=True, logits_to_keep=logits_to_keep + 1)
    return tail.logits[:, :-1, :]


def labelled_prefix(input_ids, attention_mask, labels) -> int:
    """Return how many leading tokens every row of a right-padded SFT batch shares and none of them is trained on
    (labels -100 up to and including the token after it), short of each row's last attended token; 0 when that is
    under :data:`MIN_PREFIX` or a row is left-padded."""
    if input_ids.size(0) < 2 or not bool(attention_mask[:, 0].all()):
        return 0
    lengths = attention_mask.sum(dim=1)
    limit = int(lengths.min()) - 1
    trained = (labels != -100).int()
    first = trained.argmax(dim=1)[trained.any(dim=1)]
    if first.numel():
        limit = min(limit, int(first.min()) - 1)
    same = (input_ids[:, :max(limit, 0)] == input_ids[:1, :max(limit, 0)]).all(dim=0)
    n = int(same.int().argmin()) if not bool(same.all()) else max(limit, 0)
    return n if n >= MIN_PREFIX else 0


@contextlib.contextmanager
def prefix_read_once(causal_lm, rows: int, width: int, n: int):
    """Within the block, a forward of ``causal_lm``'s decoder over a ``rows`` x ``width`` batch of right-padded rows
    reads their shared first ``n`` tokens once (:func:`labelled_prefix`): the prefix with its cache, the cache copied
    to every row, the rest of the rows on top at the positions the one-pass forward gives them; the last hidden
    states are the full batch's (the prefix's copied to every row), so whatever computes the loss from them (the
    model's head, TRL's chunked cross-entropy) runs unchanged and the gradient flows back through the copies. Any
    other call (another shape, explicit positions or embeddings, a cache) is the decoder's own."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPast

    decoder = causal_lm.get_decoder() if hasattr(causal_lm, "get_decoder") else causal_lm.base_model
    original = decoder.forward

    def forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
                use_cache=None, **kwargs):
        if (input_ids is None or tuple(input_ids.shape) != (rows, width) or attention_mask is None
                or position_ids is not None or past_key_values is not None or inputs_embeds is not None
                or any(v is not None for k, v in kwargs.items() if k != "cache_position")):
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                            **kwargs)
        head = original(input_ids=input_ids[:1, :n], attention_mask=attention_mask[:1, :n], use_cache=True)
        cache = head.past_key_values
        cache.batch_repeat_interleave(rows)
        tail = original(input_ids=input_ids[:, n:], attention_mask=attention_mask, past_key_values=cache,
                        use_cache=True)
        hidden = torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail.last_hidden_state], dim=1)
        return BaseModelOutputWithPast(last_hidden_state=hidden)

    decoder.forward = forward
    try:
        yield
    finally:
        del decoder.forward  # the class's forward again


def keeps_cache(model) -> bool:
    """Return whether ``model`` keeps a key/value cache in training: False when gradient checkpointing is on
    anywhere in it (it turns the cache off)."""
    return not any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
