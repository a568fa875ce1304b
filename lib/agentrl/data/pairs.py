"""Preference pairs and rejection-sampling data from a sample run (``runs/sample/<name>/``, agentrl.train.sample).

- ``--pairs``: TRL's conversational preference format, one row per (success, failure) pair on the same training
  item: ``prompt`` is the messages both attempts share (system, user, and any identical earlier turns with their
  tool results, as context), ``chosen`` / ``rejected`` the first assistant turn where they differ, alone. Completions
  are therefore assistant turns only; no tool result is ever a completion token. ``tools`` is a JSON string (TRL's
  DPOTrainer decodes it per row). A run sampled with ``reference = "oracle"`` adds the oracle's demonstration of
  each item as a success after the model's own: the chosen side where the model only failed. Written to
  ``<sample>/pairs/train.jsonl``.
- ``--successes``: the successful attempts (distinct conversations) as curated trajectories
  (``<sample>/successes/train.jsonl``) exported in the SFT formats (``successes/trl/train.jsonl``, ...), so
  ``agentrl sft --data <sample>/successes`` (or ``agentrl rft``) trains on them.

Both pass the sampled items through the preset's held-out gate (agentrl.core.heldout: sampling never draws a held-out
item, and a sample run from elsewhere, or from an earlier preset, is checked again here).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.core.chat import to_template_messages
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_json, read_jsonl, write_jsonl
from agentrl.data.export import export


def attempts(sample_dir: str | Path, heldout: HeldOut) -> dict[str, list[tuple[dict, bool]]]:
    """Return ``{item id: [(trajectory, success), ...]}`` of a sample run, attempts in order, success as the run
    recorded it (its success key and minimum), without the held-out items (the gate says how many it dropped)."""
    sample_dir = Path(sample_dir)
    if not (sample_dir / "manifest.json").is_file() or not (sample_dir / "outcomes.jsonl").is_file():
        raise DataError(f"{sample_dir}: not a sample run (no manifest.json / outcomes.jsonl; run `agentrl sample`)")
    manifest = read_json(sample_dir / "manifest.json")
    found = read_jsonl(sample_dir / "outcomes.jsonl", required=("id", "success"))
    outcomes = {str(o["id"]): o["success"] for o in found}
    out: dict[str, list[tuple[dict, bool]]] = {i: [] for i in outcomes}
    for j in range(int(manifest["config"]["k"])):
        for t in read_jsonl(sample_dir / "attempts" / f"a{j}" / "trajectories.jsonl"):
            item = str(t["id"])
            if item in out:
                out[item].append((t, bool(outcomes[item][j])))
    references = {str(o["id"]): bool(o.get("reference")) for o in found}
    if (sample_dir / "attempts" / "oracle" / "trajectories.jsonl").is_file():  # sample.reference = "oracle"
        for t in read_jsonl(sample_dir / "attempts" / "oracle" / "trajectories.jsonl"):
            item = str(t["id"])
            if item in out and references.get(item):
                out[item].append(({**t, "reference": True}, True))
    # the gate reads each attempt's messages (what the model read and wrote), not the outcome's id or question
    attempts_ = [(item, t, ok) for item, tried in out.items() for t, ok in tried]
    passed = heldout.keep(attempts_, f"sampled attempts of {sample_dir}", row=lambda a: a[1])
    kept: dict[str, list[tuple[dict, bool]]] = {}
    for (item, t, ok), good in zip(attempts_, passed, strict=True):
        if good:
            kept.setdefault(item, []).append((t, ok))
    return kept


def _same(a: dict, b: dict) -> bool:
    return to_template_messages([a]) == to_template_messages([b])


def pair_row(item_id: str, good: dict, bad: dict) -> dict | None:
    """Return the preference row of a success ``good`` and a failure ``bad`` of the same item: the shared messages
    as ``prompt``, the first differing assistant turn of each as ``chosen`` / ``rejected``; None when they do not
    differ at an assistant turn (identical conversations, or one stops where the other goes on)."""
    gm, bm = good["messages"], bad["messages"]
    i = 0
    while i < min(len(gm), len(bm)) and _same(gm[i], bm[i]):
        i += 1
    if i >= min(len(gm), len(bm)) or gm[i]["role"] != "assistant" or bm[i]["role"] != "assistant":
        return None
    return {"id": item_id, "prompt": to_template_messages(gm[:i]), "chosen": to_template_messages([gm[i]]),
            "rejected": to_template_messages([bm[i]]), "tools": json.dumps(good.get("tools") or [])}


def export_pairs(sample_dir: str | Path, heldout: HeldOut, max_per_item: int = 2) -> dict:
    """Write ``<sample>/pairs/train.jsonl``: up to ``max_per_item`` (success, failure) pairs per item, the i-th
    success with the i-th failure; return counts (items with both outcomes, pairs, pairs skipped as not differing
    at an assistant turn). No pair at all is a DataError (nothing is written)."""
    sample_dir = Path(sample_dir)
    trajs = attempts(sample_dir, heldout)
    rows, mixed, skipped = [], 0, 0
    for item, tried in trajs.items():
        good = [t for t, ok in tried if ok]
        bad = [t for t, ok in tried if not ok]
        if not good or not bad:
            continue
        mixed += 1
        for g, b in list(zip(good, bad, strict=False))[:max_per_item]:
            row = pair_row(item, g, b)
            if row is None:
                skipped += 1
            else:
                rows.append(row)
    counts = {"items": len(trajs), "items_with_both": mixed, "pairs": len(rows), "skipped_not_diverging": skipped}
    if not rows:
        raise DataError(f"{sample_dir}: no preference pair ({counts}); sample more attempts (sample.k) or items, or "
                        "lower sample.success_min; nothing was written")
    write_jsonl(sample_dir / "pairs" / "train.jsonl", rows)
    return counts


def export_successes(sample_dir: str | Path, heldout: HeldOut, formats=("trl",)) -> dict:
    """Write the successful attempts (distinct conversations per item) to ``<sample>/successes/train.jsonl`` and
    export them (agentrl.data.export) for SFT; return counts. No success at all is a DataError."""
    sample_dir = Path(sample_dir)
    trajs = attempts(sample_dir, heldout)
    kept = []
    for tried in trajs.values():
        seen = set()
        for t, ok in tried:
            key = json.dumps(to_template_messages(t["messages"]), sort_keys=True, default=str)
            if ok and key not in seen and not t.get("reference"):  # the model's own successes, not the oracle's
                seen.add(key)
                kept.append(t)
    if not kept:
        raise DataError(f"{sample_dir}: no successful attempt to fine-tune on; nothing was written")
    out = sample_dir / "successes"
    write_jsonl(out / "train.jsonl", kept)
    (out / "validation.jsonl").unlink(missing_ok=True)
    counts = export(out, formats, heldout)
    return {"items": len(trajs),
            "items_with_success": sum(any(ok and not t.get("reference") for t, ok in a) for a in trajs.values()),
            "rows": len(kept), "export": counts}
