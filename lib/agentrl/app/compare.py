"""Runs side by side on the items they share: per item the outcome, answer and tool calls of each run and the first
assistant turn where they diverge; improved / regressed / unchanged (the last run against the first); and on top
the aggregate table with 95% bootstrap intervals (agentrl.core.bootstrap), the paired one against the first run.

A run is a directory with ``trajectories.jsonl``: ``runs/eval/<name>`` (or just ``<name>``), a GRPO run's
held-out evaluation ``runs/grpo/<name>/eval/step_<n>``, an SFT check ``runs/sft/<name>/check/{base,sft}``. Used by
``agentrl compare`` (a terminal table, an HTML page with ``--html``) and notebook 04.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci
from agentrl.core.io import DataError, iter_jsonl
from agentrl.core.metrics import normalize_answer
from agentrl.envs import registry

STATUSES = ("improved", "regressed", "unchanged")


def run_dir(spec: str | Path, runs: str | Path = "runs") -> Path:
    """Return the directory of run ``spec``: a path holding trajectories.jsonl, or the name of ``runs/eval/<name>``.
    A DataError names what was looked for."""
    for candidate in (Path(spec), Path(runs) / "eval" / str(spec)):
        if (candidate / "trajectories.jsonl").is_file():
            return candidate
    raise DataError(f"{spec}: no trajectories.jsonl there or in {Path(runs) / 'eval' / str(spec)}")


def available_runs(runs: str | Path = "runs") -> list[str]:
    """Return every run directory under ``runs`` with trajectories (evaluations, SFT checks, GRPO evaluations)."""
    found = sorted({str(p.parent) for p in Path(runs).glob("eval/*/trajectories.jsonl")})
    found += sorted({str(p.parent) for p in Path(runs).glob("sft/*/check/*/trajectories.jsonl")})
    grpo = [p.parent for p in Path(runs).glob("grpo/*/eval/step_*/trajectories.jsonl")]
    found += [str(p) for p in sorted(grpo, key=lambda p: (str(p.parent), int(p.name.split("_")[-1])))]
    return found


def assistant_turns(record: dict) -> list[str]:
    """Return each assistant message of a trajectory as one comparable string: its text and its tool calls."""
    out = []
    for m in record.get("messages") or []:
        if m.get("role") != "assistant":
            continue
        calls = [f"{c['function']['name']}({_args(c['function'].get('arguments'))})" for c in m.get("tool_calls") or []]
        out.append(" ".join([(m.get("content") or "").strip(), *calls]).strip())
    return out


def tool_calls(record: dict) -> list[str]:
    """Return the trajectory's tool calls as ``name(arguments)``."""
    return [f"{c['function']['name']}({_args(c['function'].get('arguments'))})"
            for m in record.get("messages") or [] if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


def _args(arguments) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True) if isinstance(arguments, dict) else str(arguments)


def first_divergence(records: list[dict]) -> int | None:
    """Return the first assistant turn (1-based) where the runs' trajectories of an item differ; None when equal."""
    turns = [assistant_turns(r) for r in records]
    for i in range(max(len(t) for t in turns)):
        if len({t[i] if i < len(t) else None for t in turns}) > 1:
            return i + 1
    return None


@dataclass
class Comparison:
    """Runs compared on their shared items: ``items`` one dict per item, ``aggregate`` one per run."""

    labels: list[str]
    metric: str
    items: list[dict] = field(default_factory=list)
    aggregate: list[dict] = field(default_factory=list)
    dropped: int = 0  # items not in every run

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for it in self.items if it["status"] == s) for s in STATUSES}


def compare(specs: list[str | Path], metric: str | None = None, runs: str | Path = "runs") -> Comparison:
    """Return the Comparison of the runs ``specs`` (at least two) on the items all of them have, by ``metric``
    (default: the environment's headline success metric)."""
    if len(specs) < 2:
        raise DataError("compare needs at least two runs")
    dirs = [run_dir(s, runs) for s in specs]
    recs = [_by_id(d / "trajectories.jsonl") for d in dirs]
    shared = [i for i in recs[0] if all(i in r for r in recs[1:])]
    if not shared:
        raise DataError(f"{', '.join(map(str, dirs))}: no item is in every run")
    for item in shared:  # the same id must be the same question, or the comparison pairs different items
        questions = [str(r[item].get("question") or "") for r in recs]
        if len({normalize_answer(q) for q in questions}) > 1:
            raise DataError(f"item {item!r} is not the same question in every run ("
                            + " / ".join(repr(q[:60]) for q in questions) + "): these runs did not evaluate the same "
                            "items")
    metric = metric or _headline(recs[0][shared[0]])
    reported = sorted({k for r in recs for rec in r.values() for k, v in (rec.get("metrics") or {}).items()
                       if isinstance(v, int | float)})
    if metric not in reported:
        raise DataError(f"--metric {metric!r}: no trajectory of these runs reports it (they report "
                        f"{', '.join(reported) or 'no metric'})")
    labels = _labels(dirs)
    out = Comparison(labels, metric, dropped=len(set().union(*recs)) - len(shared))
    for item in shared:
        per = [r[item] for r in recs]
        values = [float((r.get("metrics") or {}).get(metric) or 0.0) for r in per]
        status = "improved" if values[-1] > values[0] else "regressed" if values[-1] < values[0] else "unchanged"
        out.items.append({"id": item, "question": per[0].get("question"), "gold": per[0].get("golden_answers"),
                          "status": status, "diverges_at_turn": first_divergence(per),
                          "runs": [{"outcome": v, "answer": r.get("prediction"), "tool_calls": tool_calls(r),
                                    "finish": r.get("finish")} for v, r in zip(values, per, strict=True)]})
    columns = [[it["runs"][k]["outcome"] for it in out.items] for k in range(len(dirs))]
    for k, label in enumerate(labels):
        mean, low, high = bootstrap_ci(columns[k])
        row = {"run": label, "n": len(columns[k]), metric: mean, "ci95": (low, high)}
        if k:
            d, dlow, dhigh = paired_bootstrap_ci(columns[0], columns[k])
            row.update({"vs first": d, "vs first ci95": (dlow, dhigh)})
        out.aggregate.append(row)
    return out


def _by_id(path: Path) -> dict[str, dict]:
    """Return a run's trajectories by id; an id twice is a DataError naming both lines (a run records each item
    once: two would leave one of them out of the comparison)."""
    out: dict[str, dict] = {}
    lines: dict[str, int] = {}
    for n, rec in iter_jsonl(path):
        key = str(rec.get("id"))
        if key in out:
            raise DataError(f"{path}:{n}: item {key!r} again (first at line {lines[key]}); compare runs that record "
                            "each item once")
        out[key], lines[key] = rec, n
    return out


def _headline(record: dict) -> str:
    try:
        return registry.get(record.get("env") or registry.DEFAULT).success
    except DataError:
        return "em"


def _labels(dirs: list[Path]) -> list[str]:
    parts = [d.parts for d in dirs]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    return ["/".join(p[common:]) for p in parts]


def _ci(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def format_table(c: Comparison, only: str | None = None, width: int = 40) -> str:
    """Return the terminal view: the aggregate table, the status counts, then one block per item (``only``: the
    items of one status)."""
    lines = [f"{c.metric} on {len(c.items)} shared items" + (f" ({c.dropped} not in every run left out)"
                                                           if c.dropped else "")]
    w = max(len(a["run"]) for a in c.aggregate)
    for a in c.aggregate:
        diff = (f"  vs first {a['vs first']:+.3f} {_ci(*a['vs first ci95'])}" if "vs first" in a else "")
        lines.append(f"  {a['run']:<{w}}  {a[c.metric]:.3f} {_ci(*a['ci95'])}{diff}")
    lines.append(" · ".join(f"{k} {v}" for k, v in c.counts().items()) + " (last run against the first)")
    for it in c.items:
        if only and it["status"] != only:
            continue
        turn = it["diverges_at_turn"]
        lines.append(f"\n{it['id']}  {it['status']}  diverge at turn {turn if turn else '-'}  "
                     f"{(it['question'] or '')[:80]}  gold {it['gold']}")
        for label, r in zip(c.labels, it["runs"], strict=True):
            calls = "; ".join(r["tool_calls"]) or "no tool call"
            lines.append(f"  {label:<{w}}  {r['outcome']:.2f}  answer {str(r['answer'])[:width]!r}  "
                         f"calls {calls[:2 * width]}")
    return "\n".join(lines)


def frame(c: Comparison, only: str | None = None):
    """Return the items as a polars DataFrame, one row per item, columns per run (outcome, answer, calls)."""
    import polars as pl

    rows = []
    for it in c.items:
        if only and it["status"] != only:
            continue
        row = {"id": it["id"], "status": it["status"], "diverges_at_turn": it["diverges_at_turn"],
               "question": it["question"], "gold": " | ".join(it["gold"] or [])}
        for label, r in zip(c.labels, it["runs"], strict=True):
            row[f"{label}: {c.metric}"] = r["outcome"]
            row[f"{label}: answer"] = r["answer"]
            row[f"{label}: tool calls"] = "; ".join(r["tool_calls"])
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def aggregate_frame(c: Comparison):
    """Return the aggregate table as a polars DataFrame (CI bounds as text)."""
    import polars as pl

    return pl.DataFrame([{"run": a["run"], "n": a["n"], c.metric: round(a[c.metric], 4), "95% CI": _ci(*a["ci95"]),
                          "vs first": round(a["vs first"], 4) if "vs first" in a else None,
                          "vs first 95% CI": _ci(*a["vs first ci95"]) if "vs first" in a else None}
                         for a in c.aggregate])


def write_html(c: Comparison, path: str | Path) -> Path:
    """Write a self-contained HTML page of the comparison (filter buttons by status); return its path."""
    e = html.escape
    agg = ""
    for a in c.aggregate:
        diff = f"{a['vs first']:+.3f} {_ci(*a['vs first ci95'])}" if "vs first" in a else ""
        agg += (f"<tr><td>{e(a['run'])}</td><td>{a['n']}</td><td>{a[c.metric]:.3f}</td><td>{_ci(*a['ci95'])}</td>"
                f"<td>{diff}</td></tr>")
    items = []
    for it in c.items:
        cells = "".join(f"<td><b>{r['outcome']:.2f}</b><br>{e(str(r['answer']))}<br><small>"
                        f"{e('; '.join(r['tool_calls']) or 'no tool call')}</small></td>" for r in it["runs"])
        items.append(f"<tr class='{it['status']}'><td>{e(it['id'])}<br><small>{e(it['question'] or '')}</small>"
                     f"<br><small>gold {e(str(it['gold']))}</small></td><td>{it['status']}</td>"
                     f"<td>{it['diverges_at_turn'] or '-'}</td>{cells}</tr>")
    heads = "".join(f"<th>{e(label)}</th>" for label in c.labels)
    buttons = "".join(f"<button onclick=\"show('{s}')\">{s} ({n})</button>" for s, n in c.counts().items())
    page = f"""<!doctype html><meta charset="utf-8"><title>agentrl compare</title>
<style>body{{font:14px sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:4px 8px;vertical-align:top}}.improved td:nth-child(2){{color:green}}.regressed td:nth-child(2){{color:#b00}}
</style><h1>{e(c.metric)} on {len(c.items)} shared items</h1>
<table><tr><th>run</th><th>n</th><th>{e(c.metric)}</th><th>95% CI</th><th>vs first (paired 95% CI)</th></tr>
{agg}</table>
<p>{buttons}<button onclick="show('')">all</button> (last run against the first)</p>
<table id="items"><tr><th>item</th><th>status</th><th>diverges at turn</th>{heads}</tr>{"".join(items)}</table>
<script>function show(s){{document.querySelectorAll('#items tr[class]').forEach(
r=>r.style.display=(!s||r.className===s)?'':'none')}}</script>
"""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise DataError(f"--html {path}: cannot write it ({exc.strerror or exc})") from None
    return path
