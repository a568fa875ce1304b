"""Trajectory statistics: what a set of runs did, split by outcome, ready to decide what to train on.

Success is ``f1 >= threshold`` (default 0.8) and, separately, EM = 1. Everything that varies per
trajectory (turns, tool calls, tokens) is reported as mean ± std and as a distribution, for all
trajectories and for successes and failures apart, because the seed found that *which* successes are
trained on (their spread of tool calls and turns) matters as much as how many.

Writes ``stats.json``, ``stats.md`` and PNG charts (tool calls by outcome, F1 histogram, tokens by outcome).
"""

from __future__ import annotations

from pathlib import Path

from agentrl.core.io import write_json, write_text_atomic
from agentrl.data.trajectories import trajectory_frame

OUTCOMES = ("all", "success", "failure")


def _ms(series) -> dict:
    s = series.drop_nulls()
    if s.len() == 0:
        return {"mean": None, "std": None, "n": 0}
    std = s.std()
    return {"mean": round(float(s.mean()), 4), "std": round(float(std), 4) if std is not None else 0.0,
            "n": int(s.len())}


def with_outcome(df, threshold: float = 0.8):
    """Return ``df`` with an ``outcome`` column: success when f1 >= threshold, else failure."""
    import polars as pl

    return df.with_columns(pl.when(pl.col("f1").fill_null(0) >= threshold).then(pl.lit("success"))
                           .otherwise(pl.lit("failure")).alias("outcome"))


def compute_stats(df, threshold: float = 0.8) -> dict:
    """Return the statistics of a flat trajectory frame (agentrl.data.trajectories.trajectory_frame) as a dict."""
    import polars as pl

    df = with_outcome(df, threshold)
    parts = {"all": df, "success": df.filter(pl.col("outcome") == "success"),
             "failure": df.filter(pl.col("outcome") == "failure")}
    n = df.height
    stats: dict = {
        "total": n,
        "threshold": threshold,
        "success_f1": parts["success"].height,
        "success_em": int((df["em"].fill_null(0) >= 1.0).sum()),
        "failure": parts["failure"].height,
        "errors": int(df["error"].is_not_null().sum()),
        "usage_missing": int(df["usage_missing"].sum()),
        "envs": _counts(df, "env"),
        "policies": _counts(df, "policy"),
        "finish": _counts(df, "finish"),
        "metrics": {k: _ms(df[k]) for k in ("em", "f1", "precision", "recall", "acc", "judge")
                    if df[k].drop_nulls().len()},
    }
    for col in ("turns", "tool_calls", "tool_errors"):
        stats[col] = {o: _ms(p[col]) for o, p in parts.items()}
        stats[col]["distribution"] = {o: _dist(p, col) for o, p in parts.items()}
    stats["tokens_last_turn"] = {
        "prompt": {o: _ms(p["last_prompt_tokens"]) for o, p in parts.items()},
        "completion": {o: _ms(p["last_completion_tokens"]) for o, p in parts.items()},
        "total": {o: _ms(p["last_prompt_tokens"] + p["last_completion_tokens"]) for o, p in parts.items()},
    }
    stats["tokens_cumulative"] = {k.removesuffix("_tokens"): {o: _ms(p[k]) for o, p in parts.items()}
                                  for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    with_reasoning = df.filter(pl.col("reasoning_chars") > 0)
    stats["reasoning_chars"] = {**_ms(with_reasoning["reasoning_chars"]), "trajectories": with_reasoning.height}
    for field in ("type", "env", "source"):
        if df[field].drop_nulls().n_unique() > (0 if field == "type" else 1):
            stats[f"by_{field}"] = _breakdown(df, field)
    return stats


def _counts(df, col: str) -> dict:
    vc = df[col].fill_null("none").value_counts(sort=True)
    return {str(k): int(v) for k, v in zip(vc[col].to_list(), vc["count"].to_list(), strict=True)}


def _dist(df, col: str) -> dict:
    vc = df[col].drop_nulls().value_counts().sort(col)
    return {str(k): int(v) for k, v in zip(vc[col].to_list(), vc["count"].to_list(), strict=True)}


def _breakdown(df, field: str) -> dict:
    import polars as pl

    agg = (df.filter(pl.col(field).is_not_null()).group_by(field)
           .agg(pl.len().alias("n"), (pl.col("outcome") == "success").mean().alias("success_rate"),
                pl.col("f1").mean().alias("f1"), pl.col("em").mean().alias("em"),
                pl.col("tool_calls").mean().alias("tool_calls"), pl.col("turns").mean().alias("turns"))
           .sort(field))
    return {str(r[field]): {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != field}
            for r in agg.iter_rows(named=True)}


def _fmt(ms: dict, digits: int = 2) -> str:
    return "-" if ms.get("mean") is None else f"{ms['mean']:.{digits}f} ± {ms['std']:.{digits}f}"


def stats_markdown(stats: dict, title: str = "Trajectory statistics") -> str:
    """Return the statistics as a markdown report."""
    n = stats["total"] or 1
    lines = [f"# {title}", "",
             f"- trajectories: **{stats['total']}** (errors {stats['errors']}, usage missing {stats['usage_missing']})",
             f"- success (F1 ≥ {stats['threshold']}): **{stats['success_f1']}** ({100 * stats['success_f1'] / n:.1f}%)",
             f"- success (EM = 1): **{stats['success_em']}** ({100 * stats['success_em'] / n:.1f}%)",
             f"- finish: {stats['finish']}", f"- environments: {stats['envs']}; policies: {stats['policies']}", "",
             "| metric | mean ± std |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v, 3)} |" for k, v in stats["metrics"].items()]
    lines += ["", "| per trajectory | all | success | failure |", "|---|---|---|---|"]
    rows = [("turns", stats["turns"]), ("tool calls", stats["tool_calls"]), ("tool errors", stats["tool_errors"])]
    rows += [(f"last-turn {k} tokens", v) for k, v in stats["tokens_last_turn"].items()]
    rows += [(f"cumulative {k} tokens", v) for k, v in stats["tokens_cumulative"].items()]
    for name, v in rows:
        lines.append(f"| {name} | {_fmt(v['all'], 1)} | {_fmt(v['success'], 1)} | {_fmt(v['failure'], 1)} |")
    r = stats["reasoning_chars"]
    lines += ["", f"Reasoning: {r['trajectories']} trajectories carry reasoning text, {_fmt(r, 0)} characters each."
              if r["trajectories"] else "Reasoning: no trajectory carries reasoning text."]
    for col, label in (("tool_calls", "Tool calls"), ("turns", "Turns")):
        dist = stats[col]["distribution"]
        keys = sorted({k for d in dist.values() for k in d}, key=lambda x: int(x))
        lines += ["", f"| {label} | all | success | failure |", "|---|---|---|---|"]
        lines += [f"| {k} | {dist['all'].get(k, 0)} | {dist['success'].get(k, 0)} | {dist['failure'].get(k, 0)} |"
                  for k in keys]
    for field in ("type", "env", "source"):
        if f"by_{field}" in stats:
            lines += ["", f"| {field} | n | success rate | f1 | em | tool calls | turns |", "|---" * 7 + "|"]
            for g, v in stats[f"by_{field}"].items():
                lines.append(f"| {g} | {v['n']} | {v['success_rate']} | {v['f1']} | {v['em']} | {v['tool_calls']} "
                             f"| {v['turns']} |")
    return "\n".join(lines) + "\n"


def print_stats(stats: dict, title: str = "trajectories") -> None:
    """Print the headline statistics as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    n = stats["total"] or 1
    head = Table(title=f"{title}: {stats['total']} trajectories")
    for col in ("success F1≥thr", "success EM", "errors", "usage missing", "finish"):
        head.add_column(col)
    head.add_row(f"{stats['success_f1']} ({100 * stats['success_f1'] / n:.1f}%)",
                 f"{stats['success_em']} ({100 * stats['success_em'] / n:.1f}%)", str(stats["errors"]),
                 str(stats["usage_missing"]), str(stats["finish"]))
    console.print(head)
    table = Table(title="per trajectory (mean ± std)")
    for col in ("", "all", "success", "failure"):
        table.add_column(col)
    for name, key in (("turns", "turns"), ("tool calls", "tool_calls"), ("tool errors", "tool_errors")):
        table.add_row(name, *(_fmt(stats[key][o]) for o in OUTCOMES))
    for k, v in stats["tokens_cumulative"].items():
        table.add_row(f"{k} tokens (all turns)", *(_fmt(v[o], 0) for o in OUTCOMES))
    for k, v in stats["metrics"].items():
        table.add_row(k, _fmt(v, 3), "", "")
    console.print(table)


def charts(df, threshold: float = 0.8) -> dict:
    """Return the altair charts: tool calls by outcome, F1 histogram, total tokens by outcome."""
    import altair as alt
    import polars as pl

    d = with_outcome(df, threshold)
    calls = d.group_by("outcome", "tool_calls").agg(pl.len().alias("trajectories")).sort("tool_calls")
    tool_chart = (alt.Chart(calls).mark_bar()
                  .encode(x=alt.X("tool_calls:O", title="tool calls"), xOffset="outcome:N",
                          y=alt.Y("trajectories:Q"), color="outcome:N",
                          tooltip=["outcome", "tool_calls", "trajectories"])
                  .properties(title="Tool calls by outcome", width=360, height=220))
    f1 = d.select(pl.col("f1").fill_null(0).clip(0, 1)).with_columns(
        (pl.col("f1") * 10).floor().clip(0, 9).truediv(10).alias("bin"))
    f1 = f1.group_by("bin").agg(pl.len().alias("trajectories")).sort("bin")
    f1_chart = (alt.Chart(f1).mark_bar()
                .encode(x=alt.X("bin:Q", bin=alt.Bin(step=0.1, extent=[0, 1]), title="F1"), y="trajectories:Q")
                .properties(title="F1 histogram", width=360, height=220))
    tok = d.filter(pl.col("total_tokens").is_not_null()).select("outcome", "total_tokens")
    tok_chart = (alt.Chart(tok).mark_boxplot()
                 .encode(x="outcome:N", y=alt.Y("total_tokens:Q", title="tokens, all turns"), color="outcome:N")
                 .properties(title="Tokens by outcome", width=240, height=220))
    return {"tool_calls_by_outcome": tool_chart, "f1_histogram": f1_chart, "tokens_by_outcome": tok_chart}


def analyze(sources, out_dir: str | Path, threshold: float = 0.8, *, png: bool = True) -> dict:
    """Compute statistics over ``sources`` and write stats.json, stats.md and PNG charts into ``out_dir``."""
    import altair as alt

    df = trajectory_frame(sources)
    stats = compute_stats(df, threshold)
    stats["sources"] = sorted({str(s) for s in df["source"].unique().to_list()})
    out_dir = Path(out_dir)
    write_json(out_dir / "stats.json", stats)
    write_text_atomic(out_dir / "stats.md", stats_markdown(stats))
    if png:
        alt.data_transformers.disable_max_rows()
        for name, chart in charts(df, threshold).items():
            chart.save(str(out_dir / f"{name}.png"), scale_factor=1.5)
    return stats
