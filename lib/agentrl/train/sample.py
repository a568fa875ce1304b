"""Sampling the starting policy on training items: k attempts per item, the raw material of difficulty filtering
(GRPO on the items whose outcomes differ), preference pairs (DPO) and rejection-sampling fine-tuning.

The items are GRPO's training rows (:func:`agentrl.train.grpo.split_rows`, which never includes its held-out rows
nor, for a QA file, the rows after the training slice that evaluation uses); the held-out ids are recorded in the
manifest and the exports refuse them. Each attempt is one batched run of the local policy (the SFT adapter, or the
base model) at GRPO's temperature. Output, under ``runs/sample/<name>/``::

    attempts/a<j>/trajectories.jsonl   attempt j on every item (the evaluation runner's trajectories)
    outcomes.jsonl                     per item: id, question, the k success values, successes
    filtered.json                      the ids with 0 < successes < k (the difficulty filter's kept items)
    manifest.json                      config, counts (items, kept, all-success, all-failure), held-out ids
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from agentrl.core.io import DataError

log = logging.getLogger(__name__)


@dataclass
class SampleSettings:
    """The ``[sample]`` table of a preset. Unset fields come from ``[grpo]`` (env, adapter, temperature, model)."""

    name: str = "sample"
    k: int = 4  # attempts per item
    items: int | None = None  # the first N training items (None = all of GRPO's training rows)
    temperature: float | None = None  # None = [grpo].temperature
    top_p: float | None = None  # None = [grpo].top_p
    adapter: str | None = None  # None = [grpo].adapter ("none" = the base model)
    max_new_tokens: int = 128
    batch: int = 16  # concurrent episodes = prompts per generate call
    success_key: str | None = None  # a metric of the trajectory or a reward name (default: the env's success)
    success_min: float = 1.0  # an attempt succeeds when its success_key >= success_min
    seed: int = 0


def sample_config(preset: dict | None = None, **overrides) -> SampleSettings:
    """Return the preset's ``[sample]`` settings with the non-None ``overrides``."""
    from dataclasses import replace

    from agentrl.core.config import from_dict

    cfg = from_dict(SampleSettings, (preset or {}).get("sample"), "sample")
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    if cfg.k < 2:
        raise DataError(f"sample.k must be at least 2 (got {cfg.k}): one attempt cannot tell easy from hard items")
    return cfg


def training_items(preset: dict, env: str | None = None) -> tuple[object, list[dict], list[dict]]:
    """Return ``(grpo_settings, train_rows, heldout_rows)``: GRPO's split for ``env``, with every row of the
    preset's evaluation slice (``[demo].train_questions`` onwards, for the search QA file) removed from training."""
    from agentrl.core.metrics import same_item_key
    from agentrl.train.grpo import grpo_config, split_rows

    grpo = grpo_config(preset, env=env)
    train, held = split_rows(grpo, preset)
    held_keys = {same_item_key(r) for r in held}
    train = [r for r in train if same_item_key(r) not in held_keys]
    return grpo, train, held


def success_value(traj: dict, key: str) -> float | None:
    """Return an attempt's value of ``key``: the trajectory's metric of that name, else the reward function of
    that name (agentrl.rollout.rewards, e.g. ``format``) on its messages after the user's; None for an errored
    attempt. An unknown key is a DataError."""
    from agentrl.rollout.rewards import reward_registry

    if traj.get("error") is not None:
        return None
    metrics = traj.get("metrics") or {}
    if key in metrics:
        value = metrics[key]
        return float(value) if isinstance(value, int | float) else None
    rewards = reward_registry()
    if key not in rewards:
        raise DataError(f"sample.success_key: {key!r} is neither a metric of these trajectories "
                        f"({', '.join(sorted(metrics))}) nor a reward ({', '.join(sorted(rewards))})")
    messages = traj["messages"]
    start = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 0)
    return rewards[key](None, [messages[start:]], golden_answers=[traj.get("golden_answers") or []])[0]


def succeeded(traj: dict, key: str, minimum: float) -> bool:
    """Return whether an attempt counts as a success: its ``key`` value (:func:`success_value`) is at least
    ``minimum`` (an errored or unscored attempt is a failure)."""
    value = success_value(traj, key)
    return value is not None and value >= minimum


def run_sample(settings: SampleSettings, preset: dict, *, runs: str | Path = "runs", env: str | None = None,
               policy=None) -> dict:
    """Run ``settings.k`` attempts on every training item; write the run directory; return its summary
    (counts, kept ids, seconds). ``policy`` replaces the local policy loaded from the preset (a notebook's model)."""
    import torch

    from agentrl.core.config import to_dict
    from agentrl.core.io import read_jsonl, write_json, write_jsonl
    from agentrl.core.manifest import write_manifest
    from agentrl.envs import registry
    from agentrl.rollout.evaluate import eval_config, run_eval
    from agentrl.rollout.local import LocalConfig, LocalPolicy
    from agentrl.train.grpo import build_task

    grpo, rows, held = training_items(preset, env)
    rows = rows[:settings.items] if settings.items is not None else rows
    if not rows:
        raise DataError("sample: no training items (check [grpo] train_questions / qa)")
    adapter = settings.adapter if settings.adapter is not None else grpo.adapter
    adapter = None if adapter in ("none", "") else adapter
    temperature = settings.temperature if settings.temperature is not None else grpo.temperature
    if temperature <= 0:
        raise DataError("sample.temperature must be > 0: greedy attempts would all be the same")
    key = settings.success_key or registry.get(grpo.env).success
    out = Path(runs) / "sample" / settings.name
    if policy is None:
        policy = LocalPolicy(LocalConfig(model=grpo.model.name, adapter=adapter, max_new_tokens=settings.max_new_tokens,
                                         temperature=temperature, top_p=settings.top_p or grpo.top_p,
                                         max_batch=settings.batch))
    cfg = eval_config(preset, env=grpo.env, policy="local", **{k: getattr(grpo, k) for k in _episode_keys()})
    cfg.run.concurrency = settings.batch
    cfg.run.progress = False
    task = build_task(grpo, preset)
    start = time.perf_counter()
    per_item: dict[str, list] = {str(r["id"]): [] for r in rows}
    trajs: dict[str, list] = {str(r["id"]): [] for r in rows}
    for j in range(settings.k):
        torch.manual_seed(settings.seed + j)
        run_eval(cfg, preset, overwrite=True, policy=policy, task=task, out_dir=out / "attempts" / f"a{j}", rows=rows)
        for t in read_jsonl(out / "attempts" / f"a{j}" / "trajectories.jsonl"):
            per_item[str(t["id"])].append(succeeded(t, key, settings.success_min))
            trajs[str(t["id"])].append(t)
    outcomes = [{"id": str(r["id"]), "question": r["question"], "success": per_item[str(r["id"])],
                 "successes": sum(per_item[str(r["id"])])} for r in rows]
    kept = [o["id"] for o in outcomes if 0 < o["successes"] < settings.k]
    counts = {"items": len(rows), "attempts": settings.k * len(rows), "kept": len(kept),
              "all_success": sum(o["successes"] == settings.k for o in outcomes),
              "all_failure": sum(o["successes"] == 0 for o in outcomes),
              "successes": sum(o["successes"] for o in outcomes)}
    write_jsonl(out / "outcomes.jsonl", outcomes)
    write_json(out / "filtered.json", kept)
    write_manifest(out, phase="sample", config={**to_dict(settings), "env": grpo.env, "adapter": adapter,
                                                "temperature": temperature, "success_key": key},
                   counts=counts, inputs={"model": grpo.model.name, "adapter": adapter},
                   extra={"heldout_ids": [str(r["id"]) for r in held], "train_ids": [o["id"] for o in outcomes]})
    return {"out": out, "counts": counts, "kept": kept, "env": grpo.env, "success_key": key,
            "seconds": round(time.perf_counter() - start, 1)}


def _episode_keys():
    from agentrl.envs.task import EPISODE_KEYS

    return EPISODE_KEYS


def summary_line(result: dict, k: int) -> str:
    """Return the difficulty filter's one line: kept / total with the all-success and all-failure counts."""
    c = result["counts"]
    return (f"difficulty filter: kept {c['kept']} of {c['items']} items (0 < successes < {k}; "
            f"{c['all_success']} always solved, {c['all_failure']} never; {result['success_key']} >= threshold), "
            f"{c['successes']} successes in {c['attempts']} attempts -> {result['out']}/filtered.json")

