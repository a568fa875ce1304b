"""Curation: choose which trajectories to train on, and say what was removed at each step and why.

Steps, in order: drop errored items; keep chosen environments/policies; require a final answer; minimum
F1 / EM / judge / grounded (search: the answer appears in the passages the episode was shown; trajectories of
other environments have no such metric and pass); maximum turns / tool calls; no tool errors; one trajectory
per question (the best by F1, then EM, then fewest turns); balance the tool-call / turn distribution toward a
target with a seed; cap the total; split train/validation by question (a hash of the normalised question, so
the same question never lands on both sides, even when it comes from different runs with different ids). Train
is never empty; an empty validation split writes no file.

The seed's SFT on 1,411 successes scored below SFT on 139 (F1 0.68 vs 0.70), which it traced to the uneven
spread of tool calls and turns: balancing is the lever for that. ``balance_mode="cap"`` (default) trims each
over-represented bucket to its target share of the total and keeps small buckets whole (moves *toward* the
target); ``"exact"`` samples every bucket to the exact target proportions (discards more).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentrl.core.config import to_dict
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, JsonlAppender, staged_dir, write_json
from agentrl.core.manifest import recorded_sources, write_manifest
from agentrl.core.metrics import normalize_answer
from agentrl.core.validate import AtLeast0, AtLeast1, Fraction, NonNegative, between
from agentrl.data.trajectories import iter_trajectories, trajectory_frame


@dataclass
class CurateConfig:
    """The ``[data]`` table of a preset."""

    name: str = "sft"
    min_f1: Fraction | None = 0.8
    min_em: Fraction | None = None
    min_judge: Fraction | None = None
    min_grounded: Fraction | None = None  # search: the answer was in the passages shown; rows without it pass
    require_answer: bool = True
    max_turns: AtLeast1 | None = None
    max_tool_calls: AtLeast0 | None = None
    no_tool_errors: bool = False
    dedup_questions: bool = True
    envs: list[str] | None = None
    policies: list[str] | None = None
    balance_by: list[Literal["tool_calls", "turns"]] = field(default_factory=list)  # [] = off
    # "uniform" or {bucket: weight}, buckets like "2" or "2|3"
    balance_target: dict[str, NonNegative] | Literal["uniform"] = "uniform"
    balance_cap: AtLeast1 | None = 4  # values >= cap share one bucket ("4+")
    balance_mode: Literal["cap", "exact"] = "cap"
    max_examples: AtLeast1 | None = None
    val_fraction: between(0, 1, high_open=True) = 0.1  # training needs questions: below 1
    seed: AtLeast0 = 0


def question_key(question: str) -> str:
    """Return the normalised form of a question used for de-duplication and the split."""
    return normalize_answer(question or "")


def split_of(question: str, seed: int, val_fraction: float) -> str:
    """Return "validation" or "train" for a question: a stable hash of seed and normalised question."""
    h = hashlib.sha256(f"{seed}:{question_key(question)}".encode()).digest()
    return "validation" if int.from_bytes(h[:8], "big") / 2**64 < val_fraction else "train"


def bucket_label(values: tuple, cap: int | None) -> str:
    """Return the balancing bucket of a row's values (values >= cap pooled as "cap+")."""
    return "|".join(f"{cap}+" if cap is not None and v >= cap else str(v) for v in values)


def select(df, cfg: CurateConfig, heldout: HeldOut) -> tuple:
    """Apply the curation steps to a flat trajectory frame; return ``(train_df, val_df, report)``. Trajectories of
    the ``heldout`` items (the preset's gate: by id or normalised question) go first."""
    import polars as pl

    steps: list[dict] = []

    def step(name: str, reason: str, keep) -> None:
        nonlocal df
        before = df.height
        df = df.filter(keep)
        steps.append({"step": name, "reason": reason, "removed": before - df.height, "remaining": df.height})

    steps.append({"step": "input", "reason": "trajectories read", "removed": 0, "remaining": df.height})
    # the gate reads what the model reads (every message), not the frame's id or question fields
    found = list(iter_trajectories(df["source"].unique(maintain_order=True).to_list()))
    passed = heldout.keep(found, "trajectories", row=lambda t: t[2])
    kept = {(str(path), row) for (path, row, _), ok in zip(found, passed, strict=True) if ok}
    step("heldout", f"a held-out item of {heldout.source or 'the preset'} or a near copy (never trained on)",
         pl.Series([(s, r) in kept for s, r in zip(df["source"].to_list(), df["row"].to_list(), strict=True)],
                   dtype=pl.Boolean))
    step("errors", "the item failed (policy error or timeout)", pl.col("error").is_null())
    if cfg.envs:
        step("env", f"environment not in {cfg.envs}", pl.col("env").is_in(cfg.envs))
    if cfg.policies:
        step("policy", f"policy not in {cfg.policies}", pl.col("policy").is_in(cfg.policies))
    if cfg.require_answer:
        step("finish", "no final <answer> (finish != answer)", pl.col("finish") == "answer")
    for metric, threshold in (("f1", cfg.min_f1), ("em", cfg.min_em), ("judge", cfg.min_judge)):
        if threshold is not None:
            step(f"min_{metric}", f"{metric} below {threshold} (or not measured)",
                 pl.col(metric).fill_null(-1.0) >= threshold)
    if cfg.min_grounded is not None:
        step("min_grounded", f"grounded below {cfg.min_grounded}: the answer is not in the passages the episode saw",
             pl.col("grounded").fill_null(1.0) >= cfg.min_grounded)
    if cfg.max_turns is not None:
        step("max_turns", f"more than {cfg.max_turns} turns", pl.col("turns") <= cfg.max_turns)
    if cfg.max_tool_calls is not None:
        step("max_tool_calls", f"more than {cfg.max_tool_calls} tool calls", pl.col("tool_calls") <= cfg.max_tool_calls)
    if cfg.no_tool_errors:
        step("tool_errors", "a tool call failed", pl.col("tool_errors").fill_null(0) == 0)
    df = df.with_columns(pl.col("question").map_elements(question_key, return_dtype=pl.String).alias("qkey"))
    if cfg.dedup_questions:
        before = df.height
        order = ["qkey", "f1", "em", "turns", "source", "row"]
        df = (df.sort(order, descending=[False, True, True, False, False, False], nulls_last=True)
              .unique(subset="qkey", keep="first", maintain_order=True))
        steps.append({"step": "dedup", "reason": "another trajectory of the same question scored higher",
                      "removed": before - df.height, "remaining": df.height})
    report: dict = {"steps": steps}
    if df.height == 0:  # say so before balancing, which would only complain that no bucket is left
        _nothing_left(steps)
    if cfg.balance_by:
        df, report["balance"] = balance(df, cfg)
        steps.append({"step": "balance", "reason": f"over-represented {'/'.join(cfg.balance_by)} bucket",
                      "removed": report["balance"]["removed"], "remaining": df.height})
    if cfg.max_examples is not None and df.height > cfg.max_examples:
        before = df.height
        df = df.sample(n=cfg.max_examples, seed=cfg.seed, shuffle=True)
        steps.append({"step": "max_examples", "reason": f"random sample of {cfg.max_examples}",
                      "removed": before - df.height, "remaining": df.height})
    if df.height == 0:
        _nothing_left(steps)
    df = df.with_columns(pl.col("question").map_elements(lambda q: split_of(q, cfg.seed, cfg.val_fraction),
                                                         return_dtype=pl.String).alias("split"))
    moved = {}
    # Small sets can hash lopsidedly (one question at 0.1 goes to validation one time in ten). Train is never left
    # empty: the question that hashed last into validation goes back. Validation gets one question when there are
    # two or more and none hashed there. A single question is train only.
    keys = sorted(df["qkey"].unique().to_list(), key=lambda q: hashlib.sha256(f"{cfg.seed}:{q}".encode()).digest())
    if not (df["split"] == "train").any():
        df = _move(df, keys[-1], "train")
        moved["moved_to_train"] = keys[-1]
    if cfg.val_fraction > 0 and len(keys) >= 2 and not (df["split"] == "validation").any():
        df = _move(df, keys[0], "validation")
        moved["moved_to_validation"] = keys[0]
    train, val = df.filter(pl.col("split") == "train"), df.filter(pl.col("split") == "validation")
    report["split"] = {"train": train.height, "validation": val.height, "val_fraction": cfg.val_fraction,
                       "shared_questions": len(set(train["qkey"].to_list()) & set(val["qkey"].to_list())), **moved}
    return train, val, report


def _move(df, qkey: str, split: str):
    """Return ``df`` with every trajectory of the normalised question ``qkey`` in ``split``."""
    import polars as pl

    return df.with_columns(pl.when(pl.col("qkey") == qkey).then(pl.lit(split)).otherwise("split").alias("split"))


def _nothing_left(steps: list[dict]) -> None:
    """Raise DataError saying that curation kept nothing and which steps removed what."""
    removed = "; ".join(f"{s['step']} ({s['reason']}) removed {s['removed']}" for s in steps if s["removed"])
    raise DataError("curation kept no trajectories: the filters left nothing"
                    + (f" ({removed})" if removed else " (the input has no trajectories)")
                    + "; nothing was written. Loosen the [data] filters or add trajectories.")


def balance(df, cfg: CurateConfig) -> tuple:
    """Return ``(balanced_df, report)``: rows sampled per bucket of ``cfg.balance_by`` toward the target."""
    import polars as pl

    for col in cfg.balance_by:
        if col not in ("tool_calls", "turns"):
            raise DataError(f"data.balance_by: unknown column '{col}' (tool_calls, turns)")
    labels = [bucket_label(tuple(int(x or 0) for x in vals), cfg.balance_cap)
              for vals in df.select(cfg.balance_by).iter_rows()]
    df = df.with_columns(pl.Series("bucket", labels, dtype=pl.String))
    counts = dict(df["bucket"].value_counts().iter_rows())
    if cfg.balance_target == "uniform":
        weights = dict.fromkeys(counts, 1.0)
    elif isinstance(cfg.balance_target, dict):
        weights = {str(k): float(v) for k, v in cfg.balance_target.items() if float(v) > 0}
    else:
        raise DataError(f"data.balance_target must be 'uniform' or a table of weights, got {cfg.balance_target!r}")
    total_w = sum(w for b, w in weights.items() if b in counts)
    if total_w <= 0:
        raise DataError(f"data.balance_target names no bucket present in the data (buckets: {sorted(counts)})")
    weights = {b: w / total_w for b, w in weights.items() if b in counts}
    if cfg.balance_mode == "exact":
        n_total = min(math.floor(counts[b] / w) for b, w in weights.items())
        quota = {b: round(w * n_total) for b, w in weights.items()}
    elif cfg.balance_mode == "cap":
        n_total = cfg.max_examples or df.height
        quota = {b: min(counts[b], math.ceil(w * n_total)) for b, w in weights.items()}
    else:
        raise DataError(f"data.balance_mode must be 'cap' or 'exact', got {cfg.balance_mode!r}")
    parts = []
    for i, (b, n) in enumerate(sorted(quota.items())):
        group = df.filter(pl.col("bucket") == b)
        parts.append(group.sample(n=min(n, group.height), seed=cfg.seed + i, shuffle=True))
    out = pl.concat(parts).drop("bucket") if parts else df.head(0).drop("bucket")
    after = {b: min(quota.get(b, 0), counts[b]) for b in counts}
    return out, {"by": cfg.balance_by, "mode": cfg.balance_mode, "target": weights, "before": counts, "after": after,
                 "removed": df.height - out.height}


def write_selection(df, path: Path) -> int:
    """Write the full trajectories of the rows in ``df`` (by source file and row) into ``path``, ordered by
    normalised question, source and row; return the count."""
    # A concurrent run writes its records in completion order; ordering by question makes the curated files (and
    # so the SFT data order) a function of the set of trajectories, so a rerun reproduces the same training run.
    keys = df.sort(["qkey", "source", "row"]).select("source", "row").iter_rows()
    position = {key: i for i, key in enumerate(keys)}
    records: list = [None] * len(position)
    for source in dict.fromkeys(src for src, _ in position):
        for _, row, rec in iter_trajectories([source]):
            if (source, row) in position:
                records[position[(source, row)]] = rec
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with JsonlAppender(tmp) as out:
        for rec in records:
            out.write(rec)
    tmp.replace(path)
    return len(records)


def curate(sources, cfg: CurateConfig, out_dir: str | Path, heldout: HeldOut, known: Collection[str] = ()) -> dict:
    """Curate trajectories from ``sources`` into ``out_dir`` (train/validation JSONL + curation.json); return
    the report. ``validation.jsonl`` is written only when the validation split has a trajectory. Trajectories of
    the ``heldout`` items (the preset's gate, agentrl.core.heldout) are dropped first, and counted. ``known``: the
    environments whose held-out items the gate holds; trajectories of others are named in one line."""
    df = trajectory_frame(sources)
    unknown = sorted(set(df["env"].unique().to_list()) - set(known)) if known else []
    if unknown:
        print(f"held-out set: trajectories of {', '.join(unknown)}, an environment not loaded here (no run manifest "
              "recorded its file): its held-out items are not known to the gate; curate its run directory, or name "
              "it in the preset ([eval] env = \"path/to/env.py\")")
    train, val, report = select(df, cfg, heldout)
    if train.height == 0:  # select() keeps train non-empty; an empty training file must never be written
        raise DataError("curation left no trajectory for training; nothing was written")
    out_dir = Path(out_dir)
    with staged_dir(out_dir) as stage:
        # no empty files: an empty validation split writes no validation.jsonl (SFT and export then skip it)
        report["written"] = {"train": write_selection(train, stage / "train.jsonl"),
                             "validation": write_selection(val, stage / "validation.jsonl") if val.height else 0}
        write_json(stage / "curation.json", report)
        write_manifest(stage, phase="data", name=out_dir.name, config=to_dict(cfg),
                       counts={"input": df.height, **report["written"]},
                       extra={"heldout": heldout.describe(),
                              "env_sources": sorted({s for s, _ in recorded_sources(sources)})},
                       inputs={f"source_{i}": s for i, s in enumerate(sorted(set(df["source"].to_list())))})
    return report
