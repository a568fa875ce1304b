"""What a GRPO run shows: its summary lines and its reward chart."""

from __future__ import annotations

from pathlib import Path


def print_grpo_summary(metrics: dict, out: Path) -> None:
    """Print the reward trajectory and the held-out evaluations of a GRPO run."""
    steps = metrics.get("history") or []
    print(f"{out}: {metrics['steps']} steps on "
          f"{metrics['backend']} ({metrics['backend_reason']}), {metrics['train_seconds']} s; rewards "
          f"{metrics['rewards']}")
    if steps:
        q = max(1, len(steps) // 4)
        first = sum(s["reward"] for s in steps[:q]) / q
        last = sum(s["reward"] for s in steps[-q:]) / q
        print(f"mean reward: first {q} steps {first:.3f} -> last {q} steps {last:.3f}")
    for e in metrics.get("evals") or []:
        print(f"eval @ step {e['step']}: f1 {e.get('f1', 0):.3f}, well-formed tool-call episodes "
              f"{e['episodes_with_wellformed_call']:.2f}, tool calls/episode {e['mean_calls']:.2f}")


def reward_chart(metrics: dict):
    """Return an altair chart of the mean reward (and each reward function) over steps, with agent-eval F1."""
    import altair as alt
    import polars as pl

    rows = []
    for r in metrics.get("history", []):
        rows += [{"step": r["step"], "series": k, "value": v} for k, v in r.items()
                 if k == "reward" or k.startswith("rewards/")]
    rows += [{"step": e["step"], "series": "eval f1", "value": e.get("f1", 0.0)} for e in metrics.get("evals", [])]
    rows += [{"step": e["step"], "series": "eval well-formed calls", "value": e["episodes_with_wellformed_call"]}
             for e in metrics.get("evals", [])]
    return (alt.Chart(pl.DataFrame(rows)).mark_line(point=True)
            .encode(x="step:Q", y=alt.Y("value:Q", title="reward / score"), color="series:N",
                    tooltip=["step", "series", "value"])
            .properties(title="GRPO: rewards and held-out evaluation", width=480, height=260))
