"""The learning table: SmolLM2-135M-Instruct base -> SFT -> GRPO on held-out items, on CPU (preset cpu_smol).

    uv run agentrl models prepare smollm2
    uv run python benchmarks/learning.py                 # ~40 min on a 2-core machine -> runs/learning/
    uv run python benchmarks/learning.py --smoke         # toy sizes, a few minutes -> runs/learning_smoke/

Phases: the corpus and index (reused when present); oracle demonstrations on HotpotQA questions 0..149 and on
synthetic SQL tasks; curation + export; one LoRA SFT on both environments; GRPO from the SFT adapter per
environment (search: questions 0..149, answer F1 + format; SQL: synthetic tasks, execution + format).
Held out, never trained on: HotpotQA questions 150..199 (50) and DB Bench dev tasks (30, AgentBench's data is
evaluation only). Each model (base, SFT, GRPO) runs the agent on them with the batched local policy (greedy).

Printed and written to ``runs/learning/``: ``learning.json``, ``learning.md`` and ``learning.html`` (altair):
per environment and model, F1 / EM (SQL: em and exec), the share of episodes with a well-formed tool call, mean
tool calls, the share that gave an answer; per phase the wall time and, for training, trained tokens/s; the
SFT loss curve and GRPO's reward per step, with the issue's targets marked met or missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def token_counter():
    """Return a TrainerCallback that keeps the last ``num_tokens`` the trainer logged (tokens trained on)."""
    from transformers import TrainerCallback

    class Tokens(TrainerCallback):
        num_tokens = 0.0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "num_tokens" in logs:
                Tokens.num_tokens = float(logs["num_tokens"])

    return Tokens()


def scores(metrics: dict) -> dict:
    """Return the table row of one evaluation's metrics."""
    o, t, n = metrics["overall"], metrics["tools"], max(1, metrics["n"])
    row = {"n": metrics["n"], "f1": o.get("f1"), "em": o.get("em"),
           "wellformed_call_share": t["episodes_with_wellformed_call"], "mean_calls": t["mean_calls"],
           "answered_share": round(metrics["finish"].get("answer", 0) / n, 4)}
    if "exec" in o:
        row["exec"] = o["exec"]
    return row


def evaluate(preset: dict, env: str, rows: list[dict], adapter: str | None, name: str, out: Path,
             max_new_tokens: int) -> dict:
    """Run the batched local policy (base model + ``adapter``) on ``rows``; return the table row."""
    from agentrl.evaluate import eval_config, run_eval

    extra = {"qa": "data/samples/dbbench_dev.jsonl"} if env == "sql" else {}
    cfg = eval_config(preset, name=name, env=env, policy="local", adapter=adapter, **extra)
    cfg.local.max_new_tokens = max_new_tokens
    t = time.perf_counter()
    m = run_eval(cfg, preset, rows=rows, overwrite=True, out_dir=out / "eval" / name)
    return {**scores(m), "seconds": round(time.perf_counter() - t, 1)}


def heldout(preset: dict, n_search: int, n_sql: int) -> dict[str, list[dict]]:
    """Return the held-out rows: the last HotpotQA questions after the training slice and DB Bench dev tasks."""
    from agentrl.envs.sql import load_dbbench
    from agentrl.evaluate import eval_config, load_rows

    start = preset["demo"]["train_questions"]
    search = load_rows(eval_config(preset, offset=start, limit=n_search), preset)
    tasks = load_dbbench("data/samples/dbbench_dev.jsonl")
    sql = tasks[::max(1, len(tasks) // n_sql)][:n_sql]  # a spread over SELECT and INSERT/UPDATE/DELETE tasks
    return {"search": search, "sql": sql}


def demonstrations(preset: dict, runs: Path, n_sql: int | None) -> dict:
    """Oracle demonstrations (search questions 0..train_questions-1, synthetic SQL tasks), curated + exported."""
    from agentrl.curate import curate, data_config
    from agentrl.evaluate import eval_config, run_eval
    from agentrl.export import FORMATS, export

    n_train = preset["demo"]["train_questions"]
    search = run_eval(eval_config(preset, name="smol_search_oracle", policy="oracle", offset=0, limit=n_train),
                      preset, runs=runs, overwrite=True)
    sql = run_eval(eval_config(preset, name="smol_sql_oracle", env="sql", policy="oracle", qa="synthetic",
                               limit=n_sql), preset, runs=runs, overwrite=True)
    cfg = data_config(preset)
    report = curate([runs / "eval" / "smol_search_oracle", runs / "eval" / "smol_sql_oracle"], cfg,
                    runs / "data" / cfg.name)
    export(runs / "data" / cfg.name, FORMATS)
    return {"search_oracle_f1": search["overall"]["f1"], "sql_oracle_em": sql["overall"]["em"],
            "written": report["written"]}


def run_sft_phase(preset: dict, runs: Path, smoke: bool) -> dict:
    from agentrl.train.sft import run_sft, sft_config

    cfg = sft_config(preset, data=str(runs / "data" / preset["data"]["name"]))
    if smoke:
        cfg.max_steps, cfg.logging_steps = 2, 1
    tokens = token_counter()
    t = time.perf_counter()
    res = run_sft(cfg, preset, runs=runs, callbacks=[tokens])
    seconds = time.perf_counter() - t
    m = res.metrics
    return {"adapter": str(res.out / "adapter"), "steps": m["steps"], "loss": m["loss"], "seconds": round(seconds, 1),
            "train_seconds": m["train_seconds"], "trained_tokens": tokens.num_tokens,
            "tokens_per_s": round(tokens.num_tokens / max(m["train_seconds"], 1e-9), 1), "counts": m["counts"]}


def grpo_settings(preset: dict, env: str, adapter: str, smoke: bool):
    """Return the GRPOSettings of one environment: ``[grpo]``, with ``[grpo_sql]`` replacing fields for SQL."""
    from agentrl.train.grpo import grpo_config

    table = dict(preset["grpo"])
    if env == "sql":
        table.update(preset.get("grpo_sql") or {})
    cfg = grpo_config({**preset, "grpo": table}, adapter=adapter)
    if smoke:
        cfg.max_steps = 1
    return cfg


def run_grpo_phase(preset: dict, env: str, adapter: str, runs: Path, smoke: bool) -> dict:
    from agentrl.train.grpo import run_grpo

    cfg = grpo_settings(preset, env, adapter, smoke)
    tokens = token_counter()
    t = time.perf_counter()
    res = run_grpo(cfg, preset, runs=runs, callbacks=[tokens])
    seconds = time.perf_counter() - t
    m = res.metrics
    hist = m["history"]
    q = max(1, len(hist) // 4)
    first = sum(h["reward"] for h in hist[:q]) / q if hist else None
    last = sum(h["reward"] for h in hist[-q:]) / q if hist else None
    return {"adapter": str(res.out / "adapter"), "steps": m["steps"], "seconds": round(seconds, 1),
            "train_seconds": m["train_seconds"], "trained_tokens": tokens.num_tokens,
            "tokens_per_s": round(tokens.num_tokens / max(m["train_seconds"], 1e-9), 1),
            "reward_first_quarter": first, "reward_last_quarter": last,
            "history": [{k: h.get(k) for k in ("step", "reward", "tools/call_frequency", "completions/mean_length")}
                        for h in hist]}


def targets(table: dict, grpo: dict) -> list[dict]:
    """Return the issue's targets with the measured values and met / missed."""
    s, q = table["search"], table["sql"]
    out = [
        ("SFT well-formed tool-call share >= 0.9 (search)", s["sft"]["wellformed_call_share"], 0.9),
        ("SFT well-formed tool-call share >= 0.9 (SQL)", q["sft"]["wellformed_call_share"], 0.9),
        ("SFT search F1 >= base + 0.10", s["sft"]["f1"], s["base"]["f1"] + 0.10),
        ("SFT SQL em > base", q["sft"]["em"], q["base"]["em"] + 1e-9),
        ("GRPO search held-out F1 >= SFT", s["grpo"]["f1"], s["sft"]["f1"]),
        ("GRPO SQL held-out em >= SFT", q["grpo"]["em"], q["sft"]["em"]),
    ]
    rows = [{"target": name, "measured": round(v, 4), "threshold": round(th, 4), "met": v >= th}
            for name, v, th in out]
    for env, g in grpo.items():
        first, last = g["reward_first_quarter"], g["reward_last_quarter"]
        if first is not None:
            rows.append({"target": f"GRPO {env}: mean reward last quarter > first", "measured": round(last, 4),
                         "threshold": round(first, 4), "met": last > first})
    return rows


def markdown(result: dict) -> str:
    """Return the learning table, the phase timings and the targets as markdown."""
    lines = [f"Command: `{result['command']}` ({result['total_minutes']} min)", "",
             "| env | model | n | F1 | EM | exec | well-formed call share | mean calls | answered share | eval s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for env, models in result["table"].items():
        for name, r in models.items():
            ex = f"{r['exec']:.3f}" if "exec" in r else "-"
            lines.append(f"| {env} | {name} | {r['n']} | {r['f1']:.3f} | {r['em']:.3f} | {ex} | "
                         f"{r['wellformed_call_share']:.2f} | {r['mean_calls']:.2f} | {r['answered_share']:.2f} | "
                         f"{r['seconds']} |")
    lines += ["", "| phase | wall s | steps | trained tokens | trained tokens/s (GRPO: rollouts included) |",
              "|---|---|---|---|---|"]
    for name, p in result["phases"].items():
        lines.append(f"| {name} | {p['seconds']} | {p.get('steps', '-')} | {int(p.get('trained_tokens', 0)) or '-'} "
                     f"| {p.get('tokens_per_s', '-')} |")
    sft = result["phases"]["sft"]
    if sft["loss"]:
        lines += ["", "SFT loss: " + ", ".join(f"{x['step']}: {x['loss']:.3f}" for x in sft["loss"])]
    for env in ("search", "sql"):
        g = result["phases"][f"grpo_{env}"]
        lines.append(f"GRPO {env} reward per step: " + ", ".join(f"{h['reward']:.3f}" for h in g["history"]))
    lines += ["", "| target | measured | threshold | met |", "|---|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {t['threshold']} | {'yes' if t['met'] else 'no'} |"
              for t in result["targets"]]
    return "\n".join(lines) + "\n"


def chart(result: dict):
    """Return an altair chart: held-out scores per model and environment."""
    import altair as alt
    import polars as pl

    rows = []
    for env, models in result["table"].items():
        for name, r in models.items():
            for key in ("f1", "wellformed_call_share", "answered_share", "exec"):
                if key in r:
                    rows.append({"env": env, "model": name, "metric": key, "value": r[key]})
    return (alt.Chart(pl.DataFrame(rows)).mark_bar()
            .encode(x=alt.X("model:N", sort=["base", "sft", "grpo"]), y="value:Q", color="model:N",
                    column="metric:N", row="env:N", tooltip=["env", "model", "metric", "value"])
            .properties(title="SmolLM2-135M held-out: base -> SFT -> GRPO", width=110, height=140))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    p.add_argument("--smoke", action="store_true", help="toy sizes, to check the script end to end")
    p.add_argument("--out", help="default runs/learning (runs/learning_smoke with --smoke)")
    args = p.parse_args(argv)
    os.chdir(ROOT)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")
    from agentrl.config import load_preset
    from agentrl.io import write_json, write_text_atomic
    from agentrl.pipeline import corpus_and_index
    from agentrl.smol import ensure_model

    preset = load_preset(args.config)
    out = Path(args.out or ("runs/learning_smoke" if args.smoke else "runs/learning"))
    runs = out / "runs"  # every phase's run directories, apart from other presets'
    n_search, n_sql = (4, 3) if args.smoke else (preset["demo"]["heldout_questions"],
                                                 preset["demo"]["sql_heldout_tasks"])
    new_tokens = preset["eval"]["local"]["max_new_tokens"]
    if args.smoke:
        preset["demo"]["train_questions"] = 20
    start = time.perf_counter()
    phases: dict = {}

    def timed(name, fn, *a):
        t = time.perf_counter()
        res = fn(*a)
        phases[name] = {**(res if isinstance(res, dict) else {}), "seconds": round(time.perf_counter() - t, 1)}
        print(f"[learning] {name}: {phases[name]['seconds']} s", flush=True)
        return res

    timed("prepare model", lambda: {"model": ensure_model(preset["sft"]["model"]["name"])})
    timed("corpus + index", lambda: {"index": str(corpus_and_index(preset, progress=False).index_dir)})
    held = heldout(preset, n_search, n_sql)
    timed("oracle demos + curation", demonstrations, preset, runs, 14 if args.smoke else None)
    table: dict = {"search": {}, "sql": {}}

    def eval_all(label, adapters):
        for env in ("search", "sql"):
            table[env][label] = evaluate(preset, env, held[env], adapters[env], f"{env}_{label}", out, new_tokens)
            print(f"[learning] {env} {label}: {table[env][label]}", flush=True)
        return {}

    timed("eval base", eval_all, "base", {"search": None, "sql": None})
    sft = timed("sft", run_sft_phase, preset, runs, args.smoke)
    timed("eval sft", eval_all, "sft", {"search": sft["adapter"], "sql": sft["adapter"]})
    grpo = {env: timed(f"grpo_{env}", run_grpo_phase, preset, env, sft["adapter"], runs, args.smoke)
            for env in ("search", "sql")}
    timed("eval grpo", eval_all, "grpo", {env: grpo[env]["adapter"] for env in grpo})
    cmd = "uv run python benchmarks/learning.py" + (" --smoke" if args.smoke else "") + \
        (f" --config {args.config}" if args.config != "cpu_smol" else "")
    result = {"command": cmd, "config": args.config, "heldout": {k: [r["id"] for r in v] for k, v in held.items()},
              "table": table, "phases": phases, "total_minutes": round((time.perf_counter() - start) / 60, 1)}
    result["targets"] = targets(table, {"search": phases["grpo_search"], "sql": phases["grpo_sql"]})
    write_json(out / "learning.json", result)
    md = markdown(result)
    write_text_atomic(out / "learning.md", md)
    chart(result).save(str(out / "learning.html"))
    print(md)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
