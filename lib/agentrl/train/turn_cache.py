"""A rollout's key/value cache kept across its tool turns, so a turn after a tool result reads only what is new.

TRL's tool loop builds each next turn's tokens by concatenation (the prompt, the tokens sampled so far, the tool
result's tokens) and generates from scratch: every row's question and earlier turns are read again at every turn
(on cpu_smol's SQL step ~150 tokens a row, more than the tool result itself). The cache one turn's ``generate``
filled holds all of that already, at the positions a fresh left-padded batch would give it (positions come from the
attention mask), so the next turn selects the rows that continue, masks out what they must not see (padding, and
whatever a finished row kept generating after its end-of-sequence token) and feeds only the tokens no row has read:
:func:`continue_turn`. A row is matched to the cached one it continues by its tokens (the longest prefix of its
conversation the cache holds), never by its index, so a row TRL cut or reordered still finds its own history, and
a conversation the cache does not hold is generated from scratch (:func:`agentrl.train.shared_prefill`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.train.shared_prefill import left_pad


@dataclass
class TurnState:
    """What one turn's ``generate`` leaves: its cache and, per row, the tokens at each cached column."""

    cache: object  # the filled DynamicCache (batch = rows)
    columns: object  # rows x width: input ids then the sampled tokens (generate's ``sequences``)
    mask: object  # rows x width: the input's attention mask, then 1 for every sampled column
    real: list  # per row: the conversation's tokens (the turn's input without padding, then its completion)

    def reusable(self) -> list[tuple[list[int], list[int]]]:
        """Return, per row, ``(tokens, columns)``: the row's real tokens the cache holds and their cached columns
        (the input's unpadded tokens, then the completion up to its EOS; the last sampled token never reached the
        cache, and tokens sampled after EOS are not the row's)."""
        cached = self.cache.get_seq_length()
        out = []
        for r, real in enumerate(self.real):
            cols = self.mask[r, :cached].nonzero().flatten().tolist()[:len(real)]
            out.append((real[:len(cols)], cols))
        return out


def new_state(cache, sequences, input_mask, prompts: list[list[int]], completions: list[list[int]]) -> TurnState:
    """Return the :class:`TurnState` of a turn that fed ``input_mask`` (rows x input width) and sampled
    ``sequences`` (rows x (input width + new)), the rows' unpadded inputs ``prompts`` and their cut
    ``completions``."""
    import torch

    new = sequences.size(1) - input_mask.size(1)
    mask = torch.cat([input_mask, input_mask.new_ones(input_mask.size(0), new)], dim=1)
    return TurnState(cache, sequences, mask, [p + c for p, c in zip(prompts, completions, strict=True)])


def _shared(a: list[int], b: list[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def match(state: TurnState, prompts: list[list[int]]) -> list[tuple[int, int]] | None:
    """Return, per prompt, ``(row, reused)``: the cached row holding the longest prefix of it and that prefix's
    length; None when some prompt has no cached prefix or would have nothing left to feed (generate reads at least
    one token of every row)."""
    held = state.reusable()
    out = []
    for p in prompts:
        best, row = 0, -1
        for r, (tokens, _) in enumerate(held):
            n = _shared(tokens, p)
            if n > best:
                best, row = n, r
        if row < 0 or best >= len(p):
            return None
        out.append((row, best))
    return out


def continue_turn(model, state: TurnState, prompts: list[list[int]], generation_config, pad_id: int, device):
    """Return ``(sequences, width, input_mask, cache)``: what ``model.generate`` samples for ``prompts`` (each the
    conversation so far) continuing ``state``'s cache, the width of the input part of ``sequences``, its attention
    mask and the cache (``state``'s, now holding this turn too); None when a prompt is not a continuation of a cached
    row (:func:`match`). The cache's rows are selected in place. Call it under ``torch.no_grad()``."""
    import torch

    plan = match(state, prompts)
    if plan is None:
        return None
    held = state.reusable()
    cached = state.cache.get_seq_length()
    rows = torch.tensor([r for r, _ in plan], device=device)
    state.cache.batch_select_indices(rows)
    keep = torch.zeros(len(plan), cached, dtype=state.mask.dtype, device=device)
    for i, (r, n) in enumerate(plan):
        keep[i, held[r][1][:n]] = 1  # the row's first n real tokens; padding and post-EOS samples stay masked out
    rest, rest_mask = left_pad([p[n:] for p, (_, n) in zip(prompts, plan, strict=True)], pad_id)
    # masked-out cached columns read as padding, as in a fresh left-padded batch (what logits processors such as a
    # repetition penalty see of the input)
    seen = torch.where(keep.bool(), state.columns[rows, :cached].to(device), pad_id)
    ids = torch.cat([seen, rest.to(device)], dim=1)
    mask = torch.cat([keep, rest_mask.to(device)], dim=1)
    sequences = model.generate(input_ids=ids, attention_mask=mask, past_key_values=state.cache,
                               generation_config=generation_config)
    return sequences, ids.size(1), mask, state.cache
