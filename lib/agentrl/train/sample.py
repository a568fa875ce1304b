"""Sampling the starting policy on training items: k attempts per item, the raw material of difficulty filtering
(GRPO on the items whose outcomes differ), preference pairs (DPO) and rejection-sampling fine-tuning.

The items are GRPO's training rows (its environment's ``train`` split through the preset's held-out gate), and each
attempt runs as GRPO's rollouts would: GRPO's temperature, at most ``max_tool_calling_iterations`` tool rounds and
``max_completion_length`` tokens after the prompt (model tokens and tool results), so the filter keeps only items
GRPO can finish. Each attempt is one batched run of the local policy (the SFT adapter, or the base model). Output,
under ``runs/sample/<name>/``::

    attempts/a<j>/trajectories.jsonl   attempt j on every item (the evaluation runner's trajectories)
    outcomes.jsonl                     per item: id, question, the k success values, successes
    filtered.json                      the ids with 0 < successes < k (the difficulty filter's kept items)
    manifest.json                      config, counts (items, kept, all-success, all-failure), the preset
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentrl.core.config import to_dict
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_jsonl, write_json, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.metrics import METRICS
from agentrl.core.validate import AtLeast0, AtLeast1, Finite, Moved, Positive, SettingError, at_least, between
from agentrl.envs import registry
from agentrl.rollout.evaluate import EvalConfig, run_eval
from agentrl.rollout.local import LocalConfig, LocalPolicy
from agentrl.rollout.oracle import OraclePolicy
from agentrl.rollout.rewards import reward_registry
from agentrl.rollout.runner import RunConfig
from agentrl.train.grpo import build_task, train_rows
from agentrl.train.models import base_model

log = logging.getLogger(__name__)


@dataclass
class SampleSettings:
    """The ``[sample]`` table of a preset. The policy, environment and budgets are the GRPO run's (``[grpo]``); what
    is unset here (temperature, top_p, adapter) is GRPO's too."""

    name: str = "sample"
    k: at_least(2) = 4  # attempts per item: one attempt cannot tell easy from hard items
    items: AtLeast1 | None = None  # the first N training items (None = all of GRPO's training rows)
    temperature: Positive | None = None  # None = [grpo] temperature; greedy attempts would all be the same
    top_p: between(0, 1, low_open=True) | None = None  # None = [grpo] top_p
    adapter: str | None = None  # None = [grpo] adapter ("none" = the base model)
    batch: AtLeast1 = 16  # concurrent episodes = prompts per generate call
    success_key: str | None = None  # a metric of the trajectory or a reward name (default: the env's success)
    success_min: Finite = 1.0  # an attempt succeeds when its success_key >= success_min
    seed: AtLeast0 = 0
    # "oracle": each item's oracle demonstration (gold evidence through the real tools) is recorded beside the model's
    # attempts and, where it succeeds, is the chosen side of the pairs of the attempts that failed: pairs exist
    # whenever the model fails, whatever it happens to sample (the difficulty filter and the successes are the
    # model's own)
    reference: Literal["none", "oracle"] = "none"
    moved: dict = field(default_factory=dict, metadata={"extra": Moved({
        "max_new_tokens": "[eval.<env>] max_new_tokens (the environment's evaluation budget; attempts take GRPO's "
                          "turns and completion length)"})})


def check_success_key(settings: SampleSettings, env: str) -> str:
    """Return the key an attempt's success is read from (``success_key``, else the environment's success metric); a
    SettingError of ``success_key`` when ``env``'s episodes have no such metric and no reward has that name."""
    key = settings.success_key or registry.get(env).success
    if key not in success_keys(env):
        raise SettingError("success_key", f"{key!r} is neither a metric of {env} episodes nor a reward (choose from "
                                          f"{', '.join(success_keys(env))})")
    return key


def success_keys(env: str) -> list[str]:
    """Return what ``sample.success_key`` may name for ``env``: its metrics (the answer metrics, its success and
    declared ones) and every reward."""
    spec = registry.get(env)
    return sorted({*METRICS, spec.success, *spec.metrics, *spec.reward_metrics.values(), *reward_registry()})


def success_value(traj: dict, key: str) -> float | None:
    """Return an attempt's value of ``key``: the trajectory's metric of that name, else the reward function of
    that name (agentrl.rollout.rewards, e.g. ``format``) on its messages after the user's; None for an errored
    attempt or a metric this episode did not report."""
    if traj.get("error") is not None:
        return None
    metrics = traj.get("metrics") or {}
    if key in metrics:
        value = metrics[key]
        return float(value) if isinstance(value, int | float) else None
    rewards = reward_registry()
    if key not in rewards:
        return None
    messages = traj["messages"]
    start = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 0)
    return rewards[key](None, [messages[start:]], golden_answers=[traj.get("golden_answers") or []])[0]


def succeeded(traj: dict, key: str, minimum: float) -> bool:
    """Return whether an attempt counts as a success: its ``key`` value (:func:`success_value`) is at least
    ``minimum`` (an errored or unscored attempt is a failure)."""
    value = success_value(traj, key)
    return value is not None and value >= minimum


def run_sample(settings: SampleSettings, grpo, heldout: HeldOut, preset: dict | None = None, *,
               runs: str | Path = "runs", policy=None, source: dict | None = None) -> dict:
    """Run ``settings.k`` attempts on every training item of the GRPO run ``grpo`` (its settings); write the run
    directory; return its summary (counts, kept ids, seconds). ``policy`` replaces the local policy loaded from the
    settings (a notebook's model). An attempt's turn takes the environment's evaluation budget of tokens
    (``grpo.budget``: the preset's ``[eval.<env>]``); its turns and completion length are GRPO's. Everything is checked
    before the first attempt."""
    import torch

    try:
        key = check_success_key(settings, grpo.env)
    except SettingError as exc:
        raise DataError(f"sample.success_key: {exc}") from None
    adapter = settings.adapter if settings.adapter is not None else grpo.adapter
    adapter = None if adapter in ("none", "") else adapter
    temperature = settings.temperature if settings.temperature is not None else grpo.temperature
    if temperature <= 0:
        raise DataError("sample.temperature must be > 0: greedy attempts would all be the same")
    rows = train_rows(grpo, heldout, preset)
    rows = rows[:settings.items] if settings.items is not None else rows
    out = Path(runs) / "sample" / settings.name
    task = registry.within(build_task(grpo, preset), grpo.budget)
    if grpo.max_tool_calling_iterations is not None:  # GRPO's tool rounds, then the answer
        task.max_turns = grpo.max_tool_calling_iterations + 1
    if policy is None:
        policy = LocalPolicy(LocalConfig(model=base_model(grpo.model, adapter), adapter=adapter,
                                         max_new_tokens=task.max_new_tokens, temperature=temperature,
                                         top_p=settings.top_p or grpo.top_p, max_batch=settings.batch))
    cfg = EvalConfig(name=settings.name, env=grpo.env, policy="local", envs={grpo.env: grpo.env_settings},
                     run=RunConfig(concurrency=settings.batch, progress=False,
                                   completion_budget=grpo.max_completion_length))
    start = time.perf_counter()
    per_item: dict[str, list] = {str(r["id"]): [] for r in rows}
    for j in range(settings.k):
        torch.manual_seed(settings.seed + j)
        run_eval(cfg, preset, overwrite=True, policy=policy, task=task, out_dir=out / "attempts" / f"a{j}", rows=rows)
        for t in read_jsonl(out / "attempts" / f"a{j}" / "trajectories.jsonl"):
            per_item[str(t["id"])].append(succeeded(t, key, settings.success_min))
    reference: dict[str, bool] = {}
    if settings.reference == "oracle":  # the environment's own turns: a demonstration is not cut at GRPO's rounds
        oracle_task = registry.within(build_task(grpo, preset), grpo.budget)
        run_eval(cfg, preset, overwrite=True, policy=OraclePolicy(oracle_task.oracle_plan), task=oracle_task,
                 out_dir=out / "attempts" / "oracle", rows=rows)
        for t in read_jsonl(out / "attempts" / "oracle" / "trajectories.jsonl"):
            reference[str(t["id"])] = succeeded(t, key, settings.success_min)
    outcomes = [{"id": str(r["id"]), "question": r["question"], "success": per_item[str(r["id"])],
                 "successes": sum(per_item[str(r["id"])]),
                 **({"reference": reference.get(str(r["id"]), False)} if reference else {})} for r in rows]
    kept = [o["id"] for o in outcomes if 0 < o["successes"] < settings.k]
    counts = {"items": len(rows), "attempts": settings.k * len(rows), "kept": len(kept),
              "all_success": sum(o["successes"] == settings.k for o in outcomes),
              "all_failure": sum(o["successes"] == 0 for o in outcomes),
              "successes": sum(o["successes"] for o in outcomes)}
    write_jsonl(out / "outcomes.jsonl", outcomes)
    write_json(out / "filtered.json", kept)
    write_manifest(out, phase="sample", config={**to_dict(settings), "env": grpo.env, "adapter": adapter,
                                                "temperature": temperature, "success_key": key,
                                                "max_turns": task.max_turns, "max_new_tokens": task.max_new_tokens,
                                                "completion_budget": grpo.max_completion_length},
                   counts=counts, inputs={"model": str(grpo.model.name), "adapter": adapter},
                   extra={"heldout": heldout.describe(), "preset": source or {},
                          "train_ids": [o["id"] for o in outcomes]})
    return {"out": out, "counts": counts, "kept": kept, "env": grpo.env, "success_key": key,
            "seconds": round(time.perf_counter() - start, 1)}


def summary_line(result: dict, k: int) -> str:
    """Return the difficulty filter's one line: kept / total with the all-success and all-failure counts."""
    c = result["counts"]
    return (f"difficulty filter: kept {c['kept']} of {c['items']} items (0 < successes < {k}; "
            f"{c['all_success']} always solved, {c['all_failure']} never; {result['success_key']} >= threshold), "
            f"{c['successes']} successes in {c['attempts']} attempts -> {result['out']}/filtered.json")
