"""The learning benchmark's table, targets and curves (benchmarks/learning.py writes the run; this reads it).

    uv run python benchmarks/learning.py --report      # the same as: the table of runs/learning/learning.json
"""

from __future__ import annotations

import sys
from pathlib import Path


def compare(table: dict, per_item: dict) -> None:
    """Add to every model's row its success with a 95% bootstrap interval and, for every model but SFT, the paired
    difference to SFT on the same held-out items with its interval (agentrl.core.bootstrap)."""
    from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci

    for env, models in per_item.items():
        if "sft" not in models:
            continue
        ids = sorted(models["sft"])
        for name, items in models.items():
            mean, lo, hi = bootstrap_ci([items[i] for i in ids])
            row = table[env][name]
            row.update(success=round(mean, 4), success_ci=[round(lo, 4), round(hi, 4)])
            if name != "sft":
                d, dlo, dhi = paired_bootstrap_ci([models["sft"][i] for i in ids], [items[i] for i in ids])
                row.update(diff_vs_sft=round(d, 4), diff_ci=[round(dlo, 4), round(dhi, 4)])


def targets(result: dict) -> list[dict]:
    """Return the issue's targets with what was measured and met / missed: per env, SFT above base, the best
    method's paired difference to SFT (>= 0.05 with the interval's lower end above 0), DPO's well-formed call share
    within 0.02 of SFT's, GRPO's mean reward over its last quarter of steps against its first; the run's minutes per
    environment against 60."""
    rows = []
    for env, models in result["table"].items():
        if "sft" in models and "base" in models and "success" in models["sft"]:
            d = models["sft"]["success"] - models["base"].get("success", 0)
            rows.append({"target": f"{env}: SFT above base", "measured": f"{d:+.3f}", "met": d > 0})
        diffs = [(r["diff_vs_sft"], r["diff_ci"][0], name) for name, r in models.items()
                 if "diff_vs_sft" in r and name != "base"]
        if diffs:
            d, lo, name = max(diffs, key=lambda x: (x[1], x[0]))
            rows.append({"target": f"{env}: a method beats SFT by >= 0.05, interval above 0",
                         "measured": f"{name} {d:+.3f} (lower end {lo:+.3f})", "met": d >= 0.05 and lo > 0})
        if "wellformed_call_share" in models.get("dpo", {}):
            gap = models["dpo"]["wellformed_call_share"] - models["sft"]["wellformed_call_share"]
            rows.append({"target": f"{env}: DPO keeps the well-formed call share within 0.02 of SFT's",
                         "measured": f"{gap:+.3f}", "met": gap >= -0.02})
    for env, r in result["methods"].items():
        hist = [h["reward"] for h in (r.get("grpo") or {}).get("history", []) if h.get("reward") is not None]
        if hist:
            q = -(-len(hist) // 4)  # a quarter, rounded up: 6 steps compare 2 with 2
            first, last = sum(hist[:q]) / q, sum(hist[-q:]) / q
            rows.append({"target": f"{env}: GRPO mean reward, last quarter > first ({q} of {len(hist)} steps)",
                         "measured": f"{first:.3f} -> {last:.3f}", "met": last > first})
    for env, minutes in env_minutes(result).items():
        rows.append({"target": f"{env}: <= 60 min on this machine", "measured": f"{minutes:.1f} min",
                     "met": minutes <= 60})
    return rows


def env_minutes(result: dict) -> dict[str, float]:
    """Return the minutes each environment's phases took (a phase records the environment it ran for)."""
    out: dict[str, float] = {}
    for p in result["phases"].values():
        if p.get("env") in result["table"]:
            out[p["env"]] = out.get(p["env"], 0.0) + p["seconds"] / 60
    return out


def headline(r: dict) -> str:
    """Return a row's env-specific scores (F1, SQL exec, text-game score, math answered share) as one cell."""
    keys = (("f1", "F1"), ("exec", "exec"), ("score", "score"), ("solved", "solved"),
            ("invalid_actions", "invalid actions"), ("calculator_calls", "calculator calls"))
    return ", ".join(f"{label} {r[k]:.3f}" for k, label in keys if r.get(k) is not None) or "-"


def markdown(result: dict) -> str:
    """Return the table (success with its interval, paired difference to SFT, well-formed call share, the env's
    own scores), the targets, the phase timings and the GRPO / sampling lines."""
    lines = [f"Command: `{result['command']}` ({result['total_minutes']} min, load {result['load']} at the start)", "",
             "| env (per-item outcome) | model | n | outcome (95% CI) | vs SFT (95% CI) | well-formed call share | "
             "other scores | note |",
             "|---|---|---|---|---|---|---|---|"]
    for env, models in result["table"].items():
        label = f"{env} ({result['success_keys'][env]})"
        for name, r in models.items():
            if "success" not in r:
                lines.append(f"| {label} | {name} | - | - | - | - | - | not run: {r.get('why_not', '')[:80]} |")
                continue
            ci = f"{r['success']:.3f} [{r['success_ci'][0]:.3f}, {r['success_ci'][1]:.3f}]"
            diff = (f"{r['diff_vs_sft']:+.3f} [{r['diff_ci'][0]:+.3f}, {r['diff_ci'][1]:+.3f}]"
                    if "diff_vs_sft" in r else "-")
            lines.append(f"| {label} | {name} | {r['n']} | {ci} | {diff} | {r['wellformed_call_share']:.2f} | "
                         f"{headline(r)} | |")
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |" for t in targets(result)]
    lines += ["", "| phase | wall s |", "|---|---|"]
    lines += [f"| {k} | {v['seconds']} |" for k, v in result["phases"].items()]
    for env, r in result["methods"].items():
        lines.append("")
        if r.get("sample"):
            lines.append(f"{env}: sample {r['sample']['counts']}")
        g = r.get("grpo") or {}
        if g.get("history"):
            lines.append(f"{env} GRPO reward per step: " + ", ".join(f"{h['reward']:.3f}" for h in g["history"]))
            lines.append(f"{env} GRPO KL per step: " + ", ".join(f"{h.get('kl', 0) or 0:.4f}" for h in g["history"]))
            lines.append(f"{env} GRPO groups skipped per step: "
                         + ", ".join(str(h.get("groups/skipped", "-")) for h in g["history"]))
    for env, sft in result.get("sft", {}).items():
        if sft.get("loss"):
            lines.append(f"{env} SFT loss: " + ", ".join(f"{x['step']}: {x['loss']:.3f}" for x in sft["loss"]))
    return "\n".join(lines) + "\n"


def curves(result: dict):
    """Return an altair chart: per env, GRPO's reward, validation success, KL and cut-by-length share per step, and
    DPO's loss and margin per step."""
    import altair as alt
    import polars as pl

    rows = []
    for env, r in result["methods"].items():
        key = result["success_keys"][env]
        for h in (r.get("grpo") or {}).get("history", []):
            rows += [{"env": env, "step": h["step"], "series": s, "value": h[k]}
                     for s, k in (("GRPO reward", "reward"), ("GRPO KL", "kl"),
                                  ("GRPO cut by length", "tools/cut_by_length")) if h.get(k) is not None]
        for e in (r.get("grpo") or {}).get("evals", []):
            rows.append({"env": env, "step": e["step"], "series": "GRPO validation success", "value": e.get(key, 0)})
        for h in (r.get("dpo") or {}).get("history", []):
            rows += [{"env": env, "step": h["step"], "series": s, "value": h[k]}
                     for s, k in (("DPO loss", "loss"), ("DPO margin", "rewards/margins")) if k in h]
    if not rows:
        rows = [{"env": "-", "step": 0, "series": "no training step logged", "value": 0.0}]
    return (alt.Chart(pl.DataFrame(rows)).mark_line(point=True)
            .encode(x="step:Q", y="value:Q", color="series:N", tooltip=["env", "series", "step", "value"])
            .properties(width=360, height=220).facet(column="env:N")
            .properties(title="GRPO / DPO per step (validation slice, not the held-out items)"))


def publish(out: Path, result: dict) -> None:
    """Write ``learning.md`` and ``curves.html`` of ``result`` under ``out`` and print the table."""
    from agentrl.core.io import write_text_atomic

    md = markdown(result)
    write_text_atomic(out / "learning.md", md)
    curves(result).save(str(out / "curves.html"))
    print(md)


def report(out: Path) -> int:
    """Print and rewrite the table and curves of the finished run ``out/learning.json``; return 0 (2 when the run
    has not finished)."""
    from agentrl.core.io import read_json

    path = out / "learning.json"
    if not path.exists():
        print(f"error: {path} does not exist: run the benchmark first", file=sys.stderr)
        return 2
    publish(out, read_json(path))
    return 0
