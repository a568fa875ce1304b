"""A local transformers model (+ optional LoRA adapter) as a policy, for quick checks without a server.

Prompts are rendered with the model's own chat template (tools included) and the output is parsed as
hermes ``<tool_call>`` blocks, the format Qwen models and the tiny demo model emit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.chat import render
from agentrl.policies.base import Turn, parse_hermes


@dataclass
class LocalConfig:
    """Which model to load and how to sample from it."""

    model: str = "runs/models/tiny"
    adapter: str | None = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    device: str | None = None
    chat_template_kwargs: dict = field(default_factory=dict)


class LocalPolicy:
    """Generate turns with ``model.generate``, one conversation at a time (generation is not re-entrant)."""

    kind = "local"
    secrets: tuple[str, ...] = ()

    def __init__(self, cfg: LocalConfig, model=None, tokenizer=None):
        from agentrl.models import load_inference_model

        self.cfg = cfg
        if model is None:
            model, tokenizer = load_inference_model(cfg.model, cfg.adapter, device=cfg.device)
        self.model_obj, self.tokenizer = model, tokenizer
        self.model = Path(cfg.model).name + (f"+{Path(cfg.adapter).name}" if cfg.adapter else "")
        self._lock = threading.Lock()  # not asyncio.Lock: the policy may serve several event loops in turn

    def describe(self) -> dict:
        """Return the policy settings for a manifest."""
        return {"kind": self.kind, "model": self.cfg.model, "adapter": self.cfg.adapter,
                "max_new_tokens": self.cfg.max_new_tokens, "temperature": self.cfg.temperature}

    async def generate(self, messages: list[dict], tools: list[dict], row: dict | None = None) -> Turn:
        """Return the next assistant turn parsed from the model's text."""
        return await asyncio.to_thread(self._generate_locked, messages, tools)

    def _generate_locked(self, messages: list[dict], tools: list[dict]) -> Turn:
        with self._lock:
            return self.generate_sync(messages, tools)

    def generate_sync(self, messages: list[dict], tools: list[dict]) -> Turn:
        """Return the next assistant turn (blocking)."""
        import torch

        start = time.perf_counter()
        prompt = render(self.tokenizer, messages, tools, generation_prompt=True, **self.cfg.chat_template_kwargs)
        enc = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
        enc = {k: v.to(self.model_obj.device) for k, v in enc.items()}
        sample = self.cfg.temperature > 0
        with torch.no_grad():
            out = self.model_obj.generate(**enc, max_new_tokens=self.cfg.max_new_tokens, do_sample=sample,
                                          temperature=self.cfg.temperature if sample else None,
                                          top_p=self.cfg.top_p if sample else None, top_k=None,
                                          pad_token_id=self.tokenizer.pad_token_id)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        content, calls, reasoning = parse_hermes(text)
        hit_eos = bool(new) and new[-1] in _eos_ids(self.model_obj, self.tokenizer)
        finish = "tool_calls" if calls else ("stop" if hit_eos or len(new) < self.cfg.max_new_tokens else "length")
        return Turn(content=content, tool_calls=calls, reasoning=reasoning, finish_reason=finish,
                    prompt_tokens=int(enc["input_ids"].shape[1]), completion_tokens=len(new),
                    latency_s=time.perf_counter() - start)


def _eos_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
