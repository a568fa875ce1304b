"""Export curated trajectories to SFT dataset formats.

- ``trl``: ``{"id", "messages", "tools"}`` for TRL's SFTTrainer (conversational language modelling with
  tools). Tool-call arguments are dicts, as chat templates expect; ``tools`` is a JSON string, which TRL
  decodes per row, so Arrow never merges tool schemas across rows. Load it with :func:`load_trl_dataset`
  (``messages`` as ``List(Json())`` for the same reason: rows with different tools keep their own keys).
- ``swift``: ms-swift's agent format: assistant tool calls as ``{"role": "tool_call"}`` messages whose content
  is ``{"name", "arguments"}`` JSON, results as ``{"role": "tool_response"}``, ``tools`` as a JSON string.
- ``sharegpt``: LLaMA-Factory's ShareGPT with tools: ``conversations`` of ``human`` / ``function_call`` /
  ``observation`` / ``gpt`` turns, ``system`` and ``tools`` (JSON string) beside them.

Reasoning text is left out unless asked for (instruct models are trained without it).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.core.chat import to_template_messages
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, iter_jsonl, read_jsonl, write_jsonl

FORMATS = ("trl", "swift", "sharegpt")
SPLITS = ("train", "validation")


def _has_assistant(messages: list[dict]) -> bool:
    return any(m.get("role") == "assistant" for m in messages)


def to_trl(traj: dict, include_reasoning: bool = False) -> dict:
    """Return the TRL conversational row of a trajectory."""
    messages = to_template_messages(traj["messages"])
    if include_reasoning:
        for out, src in zip(messages, traj["messages"], strict=True):
            if src.get("reasoning"):
                out["reasoning_content"] = src["reasoning"]
    return {"id": str(traj["id"]), "messages": messages, "tools": json.dumps(traj.get("tools") or [])}


def _calls(m: dict) -> list[dict]:
    """The assistant message's tool calls as ``{"name", "arguments": dict}``."""
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in to_template_messages([m])[0].get("tool_calls") or []]


def to_swift(traj: dict) -> dict:
    """Return the ms-swift agent row of a trajectory."""
    out = []
    for m in traj["messages"]:
        role = m["role"]
        if role == "assistant":
            if m.get("content"):
                out.append({"role": "assistant", "content": m["content"]})
            out += [{"role": "tool_call", "content": json.dumps(c, ensure_ascii=False)} for c in _calls(m)]
        elif role == "tool":
            out.append({"role": "tool_response", "content": m.get("content") or ""})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return {"id": str(traj["id"]), "tools": json.dumps(traj.get("tools") or [], ensure_ascii=False), "messages": out}


def to_sharegpt(traj: dict) -> dict:
    """Return the ShareGPT (LLaMA-Factory) row of a trajectory; assistant text beside a tool call is dropped."""
    system, conv = "", []
    for m in traj["messages"]:
        role = m["role"]
        if role == "system":
            system = m.get("content") or ""
        elif role == "user":
            conv.append({"from": "human", "value": m.get("content") or ""})
        elif role == "assistant" and m.get("tool_calls"):
            calls = _calls(m)
            conv.append({"from": "function_call",
                         "value": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)})
        elif role == "assistant":
            conv.append({"from": "gpt", "value": m.get("content") or ""})
        elif role == "tool":
            conv.append({"from": "observation", "value": m.get("content") or ""})
    return {"id": str(traj["id"]), "conversations": conv, "system": system,
            "tools": json.dumps(traj.get("tools") or [], ensure_ascii=False)}


CONVERTERS = {"trl": to_trl, "swift": to_swift, "sharegpt": to_sharegpt}


def export(data_dir: str | Path, formats, heldout: HeldOut) -> dict:
    """Write ``data_dir/<format>/<split>.jsonl`` for the curated splits in ``data_dir``, through the held-out gate
    ``heldout`` (what an external trainer reads is as clean as what ours trains on); return row counts.

    Trajectories without an assistant turn are skipped and counted.
    """
    data_dir = Path(data_dir)
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise DataError(f"unknown export format(s) {sorted(unknown)} (choose from {', '.join(FORMATS)})")
    if not (data_dir / "train.jsonl").exists():
        raise DataError(f"{data_dir}: no train.jsonl (run `agentrl curate` first)")
    counts: dict = {}
    splits: dict[str, list[dict]] = {}
    for split in SPLITS:
        path = data_dir / f"{split}.jsonl"
        if not path.exists():
            continue
        trajs = [rec for _, rec in iter_jsonl(path)]
        turns = [t for t in trajs if _has_assistant(t.get("messages") or [])]
        splits[split] = heldout.drop(turns, f"{split} trajectories of {data_dir}") if turns else []
        counts[split] = {"rows": len(splits[split]), "skipped_without_assistant_turn": len(trajs) - len(turns),
                         "heldout_dropped": len(turns) - len(splits[split])}
    if not splits.get("train"):
        # an empty export would only fail later, in SFT, far from its cause
        raise DataError(f"{data_dir / 'train.jsonl'}: nothing to export ({counts['train']['rows']} trajectories with "
                        f"an assistant turn, {counts['train']['skipped_without_assistant_turn']} without); "
                        "nothing was written")
    for split in SPLITS:
        kept = splits.get(split)
        for fmt in formats:
            target = data_dir / fmt / f"{split}.jsonl"
            if kept:
                write_jsonl(target, (CONVERTERS[fmt](t) for t in kept))
            else:  # no empty split files; a stale one from an earlier export goes too (validation may be absent)
                target.unlink(missing_ok=True)
    return counts


def trl_rows(path: str | Path) -> list[dict]:
    """Return the rows of a TRL export file (``messages``, ``tools``, ``id``), each with an assistant turn to train
    on (DataError naming the file and line otherwise; an empty file is one too)."""
    rows = read_jsonl(path, required=("messages", "tools"))
    if not rows:
        raise DataError(f"{path}: empty dataset")
    for i, r in enumerate(rows, start=1):
        if not _has_assistant(r["messages"]):
            raise DataError(f"{path}:{i}: row has no assistant turn to train on")
        r.setdefault("id", str(i - 1))
    return rows


def trl_dataset(rows: list[dict]):
    """Return a ``datasets.Dataset`` of TRL rows, with messages stored as JSON (no schema merging)."""
    from datasets import Dataset, Features, Json, List, Value

    features = Features({"id": Value("string"), "messages": List(Json()), "tools": Value("string")})
    return Dataset.from_list([{"id": str(r["id"]), "messages": r["messages"], "tools": r["tools"]} for r in rows],
                             features=features)


def load_trl_dataset(path: str | Path):
    """Return a ``datasets.Dataset`` from a TRL export file (:func:`trl_rows`, :func:`trl_dataset`)."""
    return trl_dataset(trl_rows(path))
