"""Import the seed repository's outputs into the trajectory format, so existing runs can be analysed and trained on.

A seed run directory holds ``results.jsonl`` (or ``intermediate_data.json``, FlashRAG's evaluated items:
``{"id", "question", "golden_answers", "output": {"pred", "metric_score", "error"}}``) and
``openai_trace.log``, one JSON object per API call: ``{"endpoint": "chat.completions.create",
"input": {"model", "messages", "tools", ...}, "output": {"choices": [...], "usage": {...}}}``.

Each question's calls are the trace entries whose first user message contains it; the longest one holds the
whole conversation and its output the final turn. Reasoning is attached per turn from every call's output
(thinking models do not resend it), usage per turn from every call (``usage: null`` is fine: the seed's
analysis crashed on it). Imported trajectories carry ``policy: "imported"``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from agentrl.core.chat import extract_answer
from agentrl.core.io import DataError, iter_jsonl, read_json, staged_dir, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.metrics import answer_metrics, gold_list
from agentrl.data.trajectories import reasoning_chars, usage_summary

_METRIC_KEYS = {"em": "em", "f1": "f1", "acc": "acc", "precision": "precision", "recall": "recall"}


def _first_user(messages: list) -> str:
    return next((str(m.get("content") or "") for m in messages if isinstance(m, dict) and m.get("role") == "user"), "")


def _message(m: dict) -> dict:
    out = {"role": m.get("role", "assistant"), "content": m.get("content") or ""}
    if isinstance(out["content"], list):  # content parts
        out["content"] = "".join(p.get("text", "") for p in out["content"] if isinstance(p, dict))
    calls = []
    for i, tc in enumerate(m.get("tool_calls") or []):
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        calls.append({"id": tc.get("id") or f"call_{i}", "type": "function",
                      "function": {"name": fn.get("name"), "arguments": args if isinstance(args, str) else
                                   json.dumps(args or {}, ensure_ascii=False)}})
    if calls:
        out["tool_calls"] = calls
    if m.get("role") == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or "")
        out["name"] = str(m.get("name") or "")
    reasoning = m.get("reasoning") or m.get("reasoning_content")
    if reasoning:
        out["reasoning"] = str(reasoning)
    return out


def load_seed_run(run_dir: str | Path, with_eval: bool | None = None) -> tuple[list[dict], list[dict]]:
    """Return ``(eval_items, trace_entries)`` of a seed run directory (``with_eval`` picks intermediate_data.json;
    None = whichever exists)."""
    run_dir = Path(run_dir)
    inter, results = run_dir / "intermediate_data.json", run_dir / "results.jsonl"
    if with_eval is None:
        with_eval = inter.exists() and not results.exists()
    eval_path = inter if with_eval else results
    if not eval_path.exists():
        raise DataError(f"{run_dir}: neither results.jsonl nor intermediate_data.json found")
    items = read_json(eval_path) if with_eval else [r for _, r in iter_jsonl(eval_path)]
    if not isinstance(items, list):
        raise DataError(f"{eval_path}: expected a list of evaluated items")
    trace = run_dir / "openai_trace.log"
    if not trace.exists():
        raise DataError(f"{run_dir}: openai_trace.log not found")
    entries = [e for _, e in iter_jsonl(trace, allow_torn_tail=True)
               if e.get("endpoint", "chat.completions.create") == "chat.completions.create"
               and isinstance(e.get("input"), dict)]
    return items, entries


def convert(items: list[dict], entries: list[dict], env: str) -> tuple[list[dict], dict]:
    """Return ``(trajectories, counts)`` built from seed eval items and their trace entries, labelled with the
    environment ``env`` (the seed's runs are search-agent runs)."""
    by_user: dict[str, list[dict]] = {}
    for e in entries:
        by_user.setdefault(_first_user(e["input"].get("messages") or []), []).append(e)
    out, missing = [], 0
    for n, item in enumerate(items):
        question = str(item.get("question") or "").strip()
        if not question:
            raise DataError(f"seed item {n}: missing field 'question'")
        calls = by_user.get(question) or [e for u, es in by_user.items() if question in u for e in es]
        if not calls:
            missing += 1
            continue
        calls = sorted(calls, key=lambda e: len(e["input"].get("messages") or []))
        final = calls[-1]
        messages = [_message(m) for m in final["input"].get("messages") or [] if isinstance(m, dict)]
        choices = (final.get("output") or {}).get("choices") or []
        if choices and isinstance(choices[0].get("message"), dict):
            messages.append(_message(choices[0]["message"]))
        assistants = [m for m in messages if m["role"] == "assistant"]
        for msg, call in zip(assistants, calls, strict=False):
            ch = ((call.get("output") or {}).get("choices") or [{}])[0].get("message") or {}
            reasoning = ch.get("reasoning") or ch.get("reasoning_content")
            if reasoning and not msg.get("reasoning"):
                msg["reasoning"] = str(reasoning)
        per_turn = []
        for call in calls:
            usage = (call.get("output") or {}).get("usage") or {}
            per_turn.append({"prompt_tokens": usage.get("prompt_tokens"),
                             "completion_tokens": usage.get("completion_tokens"), "latency_s": None,
                             "finish_reason": None})
        output = item.get("output") or {}
        last = assistants[-1]["content"] if assistants else ""
        prediction = output.get("pred") if output.get("pred") is not None else extract_answer(last)
        try:
            golds = gold_list(item.get("golden_answers"))
        except ValueError as exc:
            raise DataError(f"seed item {n} (id {item.get('id')!r}): {exc}") from None
        metrics = answer_metrics(prediction, golds)
        for k, v in (output.get("metric_score") or {}).items():
            if k in _METRIC_KEYS and isinstance(v, int | float):
                metrics[_METRIC_KEYS[k]] = float(v)
        tool_calls = sum(len(m.get("tool_calls") or []) for m in messages)
        out.append({
            "id": str(item.get("id", n)), "env": env, "model": final["input"].get("model"), "policy": "imported",
            "question": question, "golden_answers": golds, "messages": messages,
            "tools": final["input"].get("tools") or [], "prediction": prediction, "metrics": metrics,
            "usage": usage_summary(per_turn, tool_calls, {}, reasoning_chars(messages)),
            "finish": "answer" if extract_answer(last) is not None else "no_answer",
            "error": output.get("error") or None, "timing": {},
            "metadata": {k: v for k, v in (item.get("metadata") or {}).items() if k not in ("context", "paragraphs")},
        })
    return out, {"items": len(items), "imported": len(out), "without_trace": missing, "trace_entries": len(entries)}


def import_seed(run_dir: str | Path, out_dir: str | Path, with_eval: bool | None = None, *, env: str) -> dict:
    """Convert a seed run directory into ``out_dir/trajectories.jsonl`` (+ manifest), its trajectories labelled with
    environment ``env``; return the counts."""
    items, entries = load_seed_run(run_dir, with_eval)
    trajs, counts = convert(items, entries, env)
    if counts["without_trace"]:
        warnings.warn(f"{counts['without_trace']} of {counts['items']} seed items had no trace entries", stacklevel=2)
    if not trajs:
        raise DataError(f"{run_dir}: no item could be matched to its trace entries")
    with staged_dir(out_dir) as stage:
        write_jsonl(stage / "trajectories.jsonl", trajs)
        write_manifest(stage, phase="import", name=Path(out_dir).name, config={"with_eval": with_eval},
                       counts=counts, inputs={"seed_run": run_dir})
    return counts
