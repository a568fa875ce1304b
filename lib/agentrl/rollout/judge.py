"""LLM judge: is the predicted answer correct given the gold answers? Binary, strict format, cached, robust.

The judge model must reply with exactly one word, CORRECT or INCORRECT. An empty or unparseable reply is
retried with a larger token budget (reasoning models spend small budgets on thinking: a seed judge
returned empty 13% of the time at 200 tokens); after the last retry the verdict falls back to exact match
(or a fixed value) and is recorded as ``status: "fallback"`` (the runner counts them in metrics.json and
warns). A judge endpoint that refuses the request (401/403/404) stops the run instead of falling back.
Verdicts are cached on disk, keyed by judge model, question, gold answers and prediction, so reruns and GRPO
steps do not pay twice.

Usable as a metric (``agentrl eval --judge-model``) and as a GRPO reward (agentrl.rollout.rewards.judge_reward).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentrl.core.io import DataError, JsonlAppender, iter_jsonl
from agentrl.core.metrics import answer_metrics, gold_list, math_equal
from agentrl.core.validate import AtLeast0, AtLeast1, between
from agentrl.rollout.endpoint import FatalEndpointError, fatal_api_errors, load_dotenv

SYSTEM = ("You grade answers to questions. Reply with exactly one word: CORRECT if the predicted answer means "
          "the same as one of the gold answers (ignore case, articles and formatting), otherwise INCORRECT.")
_EMPHASIS = re.compile(r"[*_`~]")
_PREFIX = re.compile(r"^(?:final\s+)?(?:verdict|answer)\s*:\s*", re.IGNORECASE)
_VERDICTS = {"CORRECT": True, "INCORRECT": False}


@dataclass
class JudgeConfig:
    """Which model judges and how hard it is tried."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None  # default: JUDGE_API_KEY, then OPENAI_API_KEY
    max_tokens: AtLeast1 = 64
    max_tokens_cap: AtLeast1 = 4096  # a retry after an empty reply doubles max_tokens up to this
    temperature: between(0, 2) = 0.0
    retries: AtLeast0 = 3
    fallback: Literal["exact_match", "math_verify", "incorrect", "correct"] = "exact_match"
    cache_dir: str | None = "runs/judge_cache"
    concurrency: AtLeast1 = 16
    extra_body: dict = field(default_factory=dict)


def _bare(text: str) -> str:
    """The text without markdown emphasis, an optional "verdict:"/"answer:" prefix, punctuation or case."""
    text = _PREFIX.sub("", _EMPHASIS.sub("", text).strip())
    return text.strip(" \t.!,;:\"'()[]").upper()


def parse_verdict(text: str | None) -> bool | None:
    """Return True for CORRECT, False for INCORRECT, None when the reply is not exactly one verdict.

    The whole reply, or else its last non-blank line (a model that reasons first), must be the verdict word
    alone once markdown emphasis, a "verdict:"/"answer:" prefix and punctuation are stripped: a search for
    the word would read "the prediction is not CORRECT" as correct.
    """
    text = (text or "").strip()
    if not text:
        return None
    verdict = _VERDICTS.get(_bare(text))
    if verdict is None:
        verdict = _VERDICTS.get(_bare(text.splitlines()[-1]))
    return verdict


def prompt(question: str, golds: list[str], prediction: str) -> str:
    """Return the user message sent to the judge."""
    gold = json.dumps(golds, ensure_ascii=False)
    return f"Question: {question}\nGold answers: {gold}\nPredicted answer: {prediction}"


class LLMJudge:
    """Judge predictions through an OpenAI-compatible endpoint, with retries, fallback and a disk cache."""

    def __init__(self, cfg: JudgeConfig):
        from openai import AsyncOpenAI

        dotenv = load_dotenv()
        self.cfg = cfg
        base_url = cfg.base_url or os.environ.get("JUDGE_BASE_URL") or os.environ.get("OPENAI_BASE_URL") \
            or dotenv.get("JUDGE_BASE_URL") or dotenv.get("OPENAI_BASE_URL")
        self._key = cfg.api_key or os.environ.get("JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY") \
            or dotenv.get("JUDGE_API_KEY") or dotenv.get("OPENAI_API_KEY") or "EMPTY"
        self.model = cfg.model or os.environ.get("JUDGE_MODEL") or dotenv.get("JUDGE_MODEL")
        if not base_url or not self.model:
            raise DataError("the judge needs a model and a base URL (--judge-model/--judge-base-url, "
                            "JUDGE_MODEL/JUDGE_BASE_URL or OPENAI_BASE_URL)")
        self.base_url = base_url
        self._client = AsyncOpenAI(base_url=base_url, api_key=self._key, max_retries=3, timeout=120)
        self._cache: dict[str, bool] | None = None
        self._cache_path = Path(cfg.cache_dir) / "judge_cache.jsonl" if cfg.cache_dir else None
        self.stats = {"calls": 0, "cached": 0, "retries": 0, "fallbacks": 0}

    @property
    def secrets(self) -> tuple[str, ...]:
        """The API key, to be scrubbed from anything written."""
        return (self._key,) if self._key not in ("EMPTY", "") else ()

    def describe(self) -> dict:
        """Return the judge settings for a manifest (no key)."""
        return {"model": self.model, "base_url": self.base_url, "max_tokens": self.cfg.max_tokens,
                "retries": self.cfg.retries, "fallback": self.cfg.fallback}

    def _key_of(self, question: str, golds: list[str], prediction: str) -> str:
        blob = json.dumps([self.model, question, sorted(golds), prediction], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _load_cache(self) -> dict[str, bool]:
        if self._cache is None:
            self._cache = {}
            if self._cache_path and self._cache_path.exists():
                for _, rec in iter_jsonl(self._cache_path, allow_torn_tail=True):
                    self._cache[rec["key"]] = bool(rec["correct"])
        return self._cache

    async def judge(self, question: str, golds: str | list[str], prediction: str | None) -> dict:
        """Return ``{"correct": bool, "status": ok|cached|fallback|no_prediction, "attempts": n, "raw": str}``.

        Raises FatalEndpointError when the judge endpoint refuses the request (401/403/404: a wrong key or
        model), which no retry or fallback can make right: every verdict of the run would be a fallback.
        A 400/422 is not retried (the same request fails the same way) and falls back at once.
        """
        import openai

        golds = gold_list(golds)  # a bare string is one answer
        if not prediction or not prediction.strip():
            return {"correct": False, "status": "no_prediction", "attempts": 0, "raw": ""}
        cache = self._load_cache()
        key = self._key_of(question, golds, prediction)
        if key in cache:
            self.stats["cached"] += 1
            return {"correct": cache[key], "status": "cached", "attempts": 0, "raw": ""}
        max_tokens, raw, attempts = self.cfg.max_tokens, "", 0
        for attempt in range(self.cfg.retries + 1):
            attempts = attempt + 1
            self.stats["calls"] += 1
            self.stats["retries"] += attempt > 0
            try:
                resp = await self._client.chat.completions.create(
                    model=self.model, max_tokens=max_tokens, temperature=self.cfg.temperature,
                    messages=[{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": prompt(question, golds, prediction)}],
                    **({"extra_body": self.cfg.extra_body} if self.cfg.extra_body else {}))
                raw = (resp.choices[0].message.content or "") if resp.choices else ""
            except fatal_api_errors() as exc:
                raise FatalEndpointError(f"judge model '{self.model}' at {self.base_url}: "
                                         f"{type(exc).__name__}: {exc}") from None
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                raw = f"{type(exc).__name__}: {exc}"
                break
            except Exception as exc:  # transport errors were already retried by the client
                raw = f"{type(exc).__name__}: {exc}"
            verdict = parse_verdict(raw)
            if verdict is not None:
                cache[key] = verdict
                if self._cache_path:
                    with JsonlAppender(self._cache_path) as out:
                        out.write({"key": key, "correct": verdict, "model": self.model})
                return {"correct": verdict, "status": "ok", "attempts": attempts, "raw": raw[:200]}
            max_tokens = min(max_tokens * 4, self.cfg.max_tokens_cap)
        self.stats["fallbacks"] += 1
        return {"correct": self._fallback(golds, prediction), "status": "fallback", "attempts": attempts,
                "raw": raw[:200]}

    def _fallback(self, golds: list[str], prediction: str) -> bool:
        if self.cfg.fallback == "exact_match":
            return answer_metrics(prediction, golds)["em"] == 1.0
        if self.cfg.fallback == "math_verify":  # math-verify's equivalence, as the math environment scores
            return any(math_equal(prediction, g) for g in golds)
        return self.cfg.fallback == "correct"

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    async def judge_many(self, items: list[tuple[str, list[str], str | None]]) -> list[dict]:
        """Judge ``(question, golds, prediction)`` items concurrently (bounded); return results in order."""
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def one(item):
            async with sem:
                return await self.judge(*item)

        return list(await asyncio.gather(*(one(i) for i in items)))
