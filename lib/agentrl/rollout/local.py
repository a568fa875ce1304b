"""A local transformers model (+ optional LoRA adapter) as a policy, for quick checks without a server.

Concurrent episodes share the model: their pending turns are generated together in one left-padded, KV-cached
``generate`` call (``max_batch``), which is what makes evaluating a 135M model on CPU practical. The prompts of a
batch share their start (system prompt and tool schemas: 318 of ~350 tokens for SmolLM2's search prompts); it is
prefilled once and its KV cache copied to every row, the padding going between it and each row's own tokens. With
``fast_decode`` (a CPU) the batch is decoded by agentrl.rollout.batch_decode instead, whose finished rows leave it.

Prompts are rendered with the model's own chat template (tools included) and the output is parsed as
hermes ``<tool_call>`` blocks, the format Qwen models and the tiny demo model emit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentrl.core.chat import Turn, parse_hermes, render
from agentrl.core.cpu_precision import use_bf16
from agentrl.core.device import cuda_dtype
from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast1, NonNegative, between
from agentrl.rollout.batch_decode import decode_rows, usable
from agentrl.rollout.decode import decoding_attention, growing_cache

log = logging.getLogger(__name__)
BUDGET = ("[eval.<env>] max_new_tokens (the environment's evaluation budget: every path that evaluates it reads that "
          "one)")


@dataclass
class LocalConfig:
    """Which model to load and how to sample from it."""

    model: str = "runs/models/tiny"
    adapter: str | None = None
    # tokens a turn may generate: the environment's evaluation budget (the task's), set by the run building the policy
    max_new_tokens: AtLeast1 = field(default=256, metadata={"moved": BUDGET})
    temperature: NonNegative = 0.0  # 0 = greedy
    top_p: between(0, 1, low_open=True) = 1.0
    device: str | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    max_batch: AtLeast1 = 16  # prompts per generate call (concurrent episodes are batched); 1 = one at a time
    batch_wait_s: NonNegative = 0.05  # how long the first request waits for others to join its batch
    share_prefix: bool = True  # prefill a batch's common prompt start once (same tokens out; see the module doc)
    # a decode step that copies no keys (agentrl.rollout.decode) and drops the rows that ended from the batch
    # (agentrl.rollout.batch_decode): "auto" = when the model runs on a CPU, "on", "off"
    fast_decode: Literal["auto", "on", "off"] = "auto"


class LocalPolicy:
    """Generate turns with ``model.generate``. Concurrent episodes are batched: requests that arrive while the
    model is busy (or within ``batch_wait_s``) go into one left-padded ``generate`` call with the KV cache,
    up to ``max_batch`` prompts. ``max_batch = 1`` generates one conversation at a time."""

    kind = "local"
    secrets: tuple[str, ...] = ()

    def __init__(self, cfg: LocalConfig, model=None, tokenizer=None):
        self.cfg = cfg
        if model is None:
            model, tokenizer = load_inference_model(cfg.model, cfg.adapter, device=cfg.device)
        self.model_obj, self.tokenizer = model, tokenizer
        self.model = Path(cfg.model).name + (f"+{Path(cfg.adapter).name}" if cfg.adapter else "")
        # a thread, not an asyncio task: the policy may serve several event loops in turn
        self._batcher = _Batcher(self._generate_batch, cfg.max_batch, cfg.batch_wait_s)
        self.batch_sizes: list[int] = []  # sizes of the generate calls made, for benchmarks and tests
        self.decode_passes: list[int] = []  # rows of each forward pass of decode_rows (they shrink as rows end)

    def describe(self) -> dict:
        """Return the policy settings for a manifest."""
        return {"kind": self.kind, "model": self.cfg.model, "adapter": self.cfg.adapter,
                "max_new_tokens": self.cfg.max_new_tokens, "temperature": self.cfg.temperature}

    async def generate(self, messages: list[dict], tools: list[dict], row: dict | None = None) -> Turn:
        """Return the next assistant turn parsed from the model's text (batched with concurrent episodes)."""
        return await asyncio.wrap_future(self._batcher.submit((messages, tools)))

    def generate_sync(self, messages: list[dict], tools: list[dict]) -> Turn:
        """Return the next assistant turn (blocking)."""
        return self._batcher.submit((messages, tools)).result()

    def _generate_batch(self, requests: list[tuple[list[dict], list[dict]]]) -> list[Turn]:
        import torch

        start = time.perf_counter()
        prompts = [render(self.tokenizer, m, t, generation_prompt=True, **self.cfg.chat_template_kwargs)
                   for m, t in requests]
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        device = self.model_obj.device
        fast = self.cfg.fast_decode == "on" or (self.cfg.fast_decode == "auto" and device.type == "cpu")
        shared = shared_prefix(ids) if self.cfg.share_prefix and len(ids) > 1 else 0
        cache = self._prefill(ids[0][:shared], fast) if shared >= MIN_SHARED_PREFIX else None
        if cache is None:
            shared = 0
            cache = growing_cache(self.model_obj) if fast else None
        else:
            cache.batch_repeat_interleave(len(ids))
        rows, masks = padded(ids, shared, self.tokenizer.pad_token_id)
        enc = {"input_ids": torch.tensor(rows, device=device), "attention_mask": torch.tensor(masks, device=device)}
        sample = self.cfg.temperature > 0
        eos = _eos_ids(self.model_obj, self.tokenizer)
        with torch.no_grad(), decoding_attention(self.model_obj) if fast else contextlib.nullcontext():
            if fast and usable(self.model_obj, cache, sample):
                # finished rows leave the batch and the cache (agentrl.rollout.batch_decode): the same tokens
                news = decode_rows(self.model_obj, enc["input_ids"], enc["attention_mask"], cache,
                                   max_new_tokens=self.cfg.max_new_tokens, eos=eos, temperature=self.cfg.temperature,
                                   top_p=self.cfg.top_p, passes=self.decode_passes)
            else:
                # synced_gpus=False: in a distributed run each rank generates alone on full weights (agentrl.train.
                # rank_eval); transformers would otherwise sync every token with the other ranks of an FSDP model
                out = self.model_obj.generate(**enc, past_key_values=cache, max_new_tokens=self.cfg.max_new_tokens,
                                              do_sample=sample, temperature=self.cfg.temperature if sample else None,
                                              top_p=self.cfg.top_p if sample else None, top_k=None, use_cache=True,
                                              pad_token_id=self.tokenizer.pad_token_id, synced_gpus=False)
                width = enc["input_ids"].shape[1]
                news = [out[i, width:].tolist() for i in range(len(requests))]
        self.batch_sizes.append(len(requests))
        latency = time.perf_counter() - start
        turns = []
        for i, new in enumerate(news):
            cut = next((j + 1 for j, t in enumerate(new) if t in eos), None)
            hit_eos = cut is not None
            # generate pads the rows that ended before the longest; decode_rows returns none
            new = new[:cut] if hit_eos else [t for t in new if t != self.tokenizer.pad_token_id]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            content, calls, reasoning = parse_hermes(text)
            finish = "tool_calls" if calls else ("stop" if hit_eos or len(new) < self.cfg.max_new_tokens
                                                 else "length")
            turns.append(Turn(content=content, tool_calls=calls, reasoning=reasoning, finish_reason=finish,
                              prompt_tokens=int(enc["attention_mask"][i].sum()), completion_tokens=len(new),
                              latency_s=latency))
        return turns

    def _prefill(self, prefix: list[int], grow: bool = False):
        """Return the KV cache of ``prefix`` (batch of one; one that grows in place when ``grow``), or None when the
        model's cache cannot be copied to several rows (the batch is then generated without it)."""
        import torch

        empty = growing_cache(self.model_obj) if grow else None
        with torch.no_grad():
            cache = self.model_obj(input_ids=torch.tensor([prefix], device=self.model_obj.device), use_cache=True,
                                   **({} if empty is None else {"past_key_values": empty})).past_key_values
        return cache if hasattr(cache, "batch_repeat_interleave") else None


# a shared start shorter than this is not worth a forward pass of its own
MIN_SHARED_PREFIX = 32


def shared_prefix(ids: list[list[int]]) -> int:
    """Return how many leading tokens all of ``ids`` share, leaving at least one token of each row unshared (the
    first generation step needs an input in every row)."""
    first, n = ids[0], min(len(x) for x in ids) - 1
    for x in ids[1:]:
        n = next((i for i in range(n) if x[i] != first[i]), n)
    return max(0, n)


def padded(ids: list[list[int]], shared: int, pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Return ``(rows, attention_masks)``: each row is the ``shared`` start, padding, then its own tokens, so that
    new tokens follow every prompt directly (``shared = 0``: plain left padding). Position ids come from the mask,
    so every token keeps the position it has unpadded."""
    width = max(len(x) for x in ids) - shared
    rows, masks = [], []
    for x in ids:
        own, gap = x[shared:], width - (len(x) - shared)
        rows.append(x[:shared] + [pad_id] * gap + own)
        masks.append([1] * shared + [0] * gap + [1] * len(own))
    return rows, masks


class _Batcher:
    """One worker thread that runs ``fn`` on batches of the requests submitted since its last call."""

    def __init__(self, fn, max_batch: int, wait_s: float):
        self.fn, self.max_batch, self.wait_s = fn, max(1, max_batch), wait_s
        self.queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.idle_s = 5.0

    def submit(self, request) -> Future:
        """Queue ``request``; return a Future of its result."""
        fut: Future = Future()
        self.queue.put((request, fut))
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="local-policy-batcher")
                self._thread.start()
        return fut

    def _take(self) -> list:
        try:
            items = [self.queue.get(timeout=self.idle_s)]
        except queue.Empty:
            return []
        deadline = time.monotonic() + self.wait_s
        while len(items) < self.max_batch:
            try:
                items.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return items

    def _run(self) -> None:
        while True:
            taken = self._take()
            if not taken:
                # idle: end the thread, which holds the policy and so its model (a worker per finished
                # evaluation kept every model of a notebook or benchmark in memory); submit() starts a new one
                with self._start_lock:
                    if self.queue.empty():
                        self._thread = None
                        return
                continue
            # an episode that timed out cancelled its future: drop it (a cancelled future cannot take a result)
            items = [(req, fut) for req, fut in taken if fut.set_running_or_notify_cancel()]
            if not items:
                continue
            try:
                results = self.fn([req for req, _ in items])
            except BaseException as exc:  # every waiting episode gets the error, the worker lives on
                for _, fut in items:
                    fut.set_exception(exc)
                continue
            for (_, fut), res in zip(items, results, strict=True):
                fut.set_result(res)


def _eos_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids

def load_tokenizer(path: str | Path):
    """Return the tokenizer saved at ``path`` (or a hub id), left-padded for batched generation."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def inference_dtype(device: str, dtype: str = "auto"):
    """Return the dtype a model is loaded in for inference on ``device``: on CUDA bf16 only where the GPU has it
    natively, else fp16 (an explicit "bfloat16" on a T4 too, with a warning); on CPU for "auto" bf16 where this
    machine's measurement found bf16 generation faster (agentrl.core.cpu_precision), else float32."""
    import torch

    if str(device).startswith("cuda"):
        return cuda_dtype(dtype, log)
    if dtype in ("auto", None):
        return torch.bfloat16 if use_bf16("generate") else torch.float32
    return getattr(torch, dtype)


def load_inference_model(model_path: str | Path, adapter: str | Path | None = None, *, dtype: str = "auto",
                         device: str | None = None):
    """Return ``(model, tokenizer)`` in eval mode, with the LoRA ``adapter`` applied when given.

    A missing local model or adapter directory raises DataError naming it.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if _looks_local(model_path) and not Path(model_path).is_dir():
        raise DataError(f"{model_path}: model directory not found")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise DataError(f"{adapter}: adapter not found (expected adapter_config.json in it)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = inference_dtype(device, dtype)
    tokenizer = load_tokenizer(adapter if adapter and (Path(adapter) / "tokenizer_config.json").exists()
                               else model_path)
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch_dtype).to(device)
    if adapter is not None:
        from peft import PeftModel

        # merged into the weights: the same outputs without the adapter's extra matmuls (an unmerged rank-16 LoRA
        # on every linear layer made a 20 x 1300-token prefill of SmolLM2 28% slower on CPU: docs/decisions.md)
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.eval()
    return model, tokenizer


def _looks_local(path) -> bool:
    s = str(path)
    return s.startswith((".", "/", "~")) or Path(s).exists() or s.count("/") != 1
