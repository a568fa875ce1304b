"""A decode step that moves fewer bytes: grouped-query attention without copied keys, a key/value cache that grows in
place (``fast_decode``: GRPO's rollouts, agentrl.train.trainers, and the local policy's turns, agentrl.rollout.local).

On cpu_smol's SQL step (16 rows, ~450 cached tokens, SmolLM2-135M: 9 query heads over 3 key/value heads, 30 layers)
a decode step is memory-bound on a 2-core machine, and two copies of the whole cache dominated what is not matmul
(``torch.profiler``, docs/decisions.md): transformers' SDPA path repeats every key and value head for the query heads
that share it (``repeat_kv``: 3x the cache, copied each layer and step, because a padding mask rules out SDPA's
``enable_gqa`` on a CPU), and ``DynamicCache`` appends each token with ``torch.cat`` (the whole cache again into
fresh memory, each layer and step).

- :func:`grouped_decode_attention`: a one-token query reads the shared key/value heads in place (the query heads
  grouped per key/value head, two batched matmuls and a softmax); longer queries (prefill, the loss) are SDPA's.
  Same result up to float rounding (tested against SDPA).
- :class:`GrowingLayer` / :func:`growing_cache`: the cache written into preallocated storage that doubles when
  full; what attention reads is a view of the filled part.
"""

from __future__ import annotations

import contextlib
import functools

NAME = "agentrl_decode"  # the attention implementation's registered name


def grouped_decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                             is_causal=None, **kwargs):
    """Return ``(output, None)`` of attention as transformers' attention interface expects it (output as
    batch x query length x heads x head dim). A one-token query without dropout is computed with the query heads
    grouped over their shared key/value head (no repeated keys); anything else goes to SDPA's implementation."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, heads, q_len, d = query.shape
    kv_heads = key.shape[1]
    if q_len != 1 or dropout or heads % kv_heads or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    scale = d ** -0.5 if scaling is None else scaling
    q = query.reshape(b, kv_heads, heads // kv_heads, d)  # query head h reads key/value head h // group (repeat_kv)
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale  # b x kv heads x group x keys
    if attention_mask is not None:
        last = attention_mask[:, :, -1:, :]  # b x 1 x 1 x keys
        if last.dtype == torch.bool:
            scores = scores.masked_fill(~last, torch.finfo(scores.dtype).min)
        else:
            scores = scores + last
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs, value)  # b x kv heads x group x d
    return out.reshape(b, heads, 1, d).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register :func:`grouped_decode_attention` (and SDPA's mask for it) with transformers once; return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


@contextlib.contextmanager
def decoding_attention(model):
    """Run the block with ``model`` (a transformers model, or a peft model around one) attending through
    :func:`grouped_decode_attention` where it attends through SDPA; yield whether it does. Restored on exit."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(
            base, "set_attn_implementation"):
        yield False
        return
    base.set_attn_implementation(register())
    try:
        yield config._attn_implementation == NAME
    finally:
        base.set_attn_implementation("sdpa")


class _Growing:
    """Storage for one layer's keys or values: a buffer along the sequence axis and how much of it is filled."""

    __slots__ = ("buffer", "filled")

    def __init__(self):
        self.buffer, self.filled = None, 0

    def view(self):
        return None if self.buffer is None else self.buffer[:, :, :self.filled]

    def set(self, tensor) -> None:
        self.buffer = tensor
        self.filled = tensor.shape[-2] if tensor is not None and tensor.dim() == 4 else 0

    def append(self, states) -> None:
        need = self.filled + states.shape[-2]
        buf = self.buffer
        if buf is None or buf.dim() != 4 or need > buf.shape[-2] or buf.shape[:2] != states.shape[:2]:
            grown = states.new_empty(*states.shape[:2], max(64, 2 * need), states.shape[-1])
            if self.filled:
                grown[:, :, :self.filled] = buf[:, :, :self.filled]
            self.buffer = buf = grown
        buf[:, :, self.filled:need] = states
        self.filled = need


@functools.cache
def growing_layer_class() -> type:
    """Return the cache layer class that grows in place: transformers' ``DynamicLayer`` with its keys and values in
    preallocated storage (every ``DynamicLayer`` method that replaces ``keys`` / ``values`` works on it)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """``DynamicLayer`` whose ``update`` writes the new tokens into preallocated storage (doubling when full)
        instead of concatenating the whole cache; ``keys`` / ``values`` are views of the filled part."""

        def __init__(self, *args, **kwargs):
            self._k, self._v = _Growing(), _Growing()
            super().__init__(*args, **kwargs)

        keys = property(lambda self: self._k.view(), lambda self, t: self._k.set(t))
        values = property(lambda self: self._v.view(), lambda self, t: self._v.set(t))

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self._k.append(key_states)
            self._v.append(value_states)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._k.filled if self.is_initialized else 0

    return GrowingLayer


def growing_cache(model):
    """Return an empty ``DynamicCache`` for ``model`` whose layers grow in place (:func:`growing_layer_class`), or
    None where the model's cache is not made of plain dynamic layers (sliding windows, linear attention)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    cache = DynamicCache(config=config)
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    grow = growing_layer_class()
    cache.layers = [grow() for _ in cache.layers]
    return cache
