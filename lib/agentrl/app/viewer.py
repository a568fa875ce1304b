"""Views of trajectories for notebooks: a flat table, a per-type chart and a turn-by-turn chat rendering."""

from __future__ import annotations

import html
import json

from agentrl.envs import registry


def trajectories_frame(records: list[dict]):
    """Return a polars DataFrame with one row per trajectory (id, question, prediction, gold, metrics, usage)."""
    import polars as pl

    rows = []
    for r in records:
        m, u = r.get("metrics") or {}, r.get("usage") or {}
        rows.append({
            "id": r["id"], "type": (r.get("metadata") or {}).get("type"), "question": r["question"],
            "prediction": r.get("prediction"), "gold": " | ".join(r.get("golden_answers") or []),
            "f1": m.get("f1"), "em": m.get("em"), "acc": m.get("acc"), "judge": m.get("judge"),
            "finish": r.get("finish"), "turns": u.get("turns"), "tool_calls": u.get("tool_calls"),
            "tool_errors": u.get("tool_errors"), "tokens": u.get("total_tokens"), "error": r.get("error"),
        })
    schema = {"f1": pl.Float64, "em": pl.Float64, "acc": pl.Float64, "judge": pl.Float64, "tokens": pl.Int64}
    return pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)


def metric_by_type_chart(records: list[dict], metric: str = "f1"):
    """Return an altair bar chart of the mean ``metric`` per question type (with counts in the tooltip)."""
    import altair as alt
    import polars as pl

    df = trajectories_frame(records).with_columns(pl.col("type").fill_null("all"))
    agg = df.group_by("type").agg(pl.col(metric).mean().alias(metric), pl.len().alias("n")).sort("type")
    # a band per type, wide enough for its label, and labels at an angle: long type names are not cut off
    return (alt.Chart(agg).mark_bar().encode(
        x=alt.X("type:N", title="question type", axis=alt.Axis(labelAngle=-30, labelLimit=240)),
        y=alt.Y(f"{metric}:Q", scale=alt.Scale(domain=[0, 1])), tooltip=["type", metric, "n"])
        .properties(title=f"mean {metric} by question type", width=alt.Step(60), height=220))


def metric_notes(env: str) -> str:
    """Return the note that explains ``env``'s metrics side by side (its registry entry's ``metrics_note``; ""
    when none is needed or ``env`` is unknown)."""
    try:
        return registry.get(env).metrics_note
    except Exception:  # a user's environment that no longer loads: no note
        return ""


def chat_markdown(traj: dict, max_chars: int = 1200) -> str:
    """Return a markdown rendering of a trajectory, turn by turn (long tool outputs cut to ``max_chars``)."""
    label = " (oracle demonstration)" if traj.get("policy") == "oracle" else ""
    # only what the record has: a training row (03's data) has no model, finish, prediction or metrics
    head = [f"{key} `{traj[field]}`" for key, field in (("model", "model"), ("finish", "finish"),
                                                        ("prediction", "prediction"), ("gold", "golden_answers"))
            if traj.get(field) is not None]
    if (traj.get("metrics") or {}).get("f1") is not None:
        head.append(f"f1 {float(traj['metrics']['f1']):.2f}")
    lines = [" · ".join([f"**{traj['id']}**{label}", *head])]
    if traj.get("error"):
        lines.append(f"> error: {traj['error']}")
    for m in traj.get("messages") or []:
        role = m["role"]
        text = (m.get("content") or "").strip()
        if len(text) > max_chars:
            text = text[:max_chars] + " …"
        if m.get("reasoning"):
            lines.append(f"*{role} reasoning:* {_escape(m['reasoning'][:max_chars])}")
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            lines.append(f"**{role} → `{fn['name']}`** `{_short(fn['arguments'])}`")
        if text or not m.get("tool_calls"):
            lines.append(f"**{role}{' ' + m['name'] if role == 'tool' and m.get('name') else ''}:**\n\n"
                         + "\n".join(f"> {_escape(line)}" for line in (text or "(empty)").splitlines()))
    return "\n\n".join(lines)


def _escape(text: str) -> str:
    # markdown passes HTML through: <answer>...</answer> would vanish as an unknown tag

    return html.escape(text, quote=False)


def _short(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        return str(arguments)
