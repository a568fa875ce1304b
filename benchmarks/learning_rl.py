"""The learning table with reinforcement: SmolLM2-135M-Instruct base -> SFT -> {difficulty-filtered GRPO, DPO,
rejection-sampling SFT} on held-out items, search and SQL, each method's paired difference to SFT with a 95%
bootstrap interval (preset cpu_smol).

    uv run agentrl models prepare smollm2
    uv run python benchmarks/learning_rl.py            # <= 60 min on a 2-core machine -> runs/learning_rl/
    uv run python benchmarks/learning_rl.py --quick    # the same code path at toy sizes -> runs/learning_rl_quick/

Per environment (search: HotpotQA; SQL: synthetic training tasks, DB Bench dev held out with AgentBench scoring):
oracle demonstrations -> one LoRA SFT on both environments (benchmarks/learning.py's phases) -> ``sample``: k
attempts per training item with the SFT adapter at GRPO's temperature -> GRPO from the SFT adapter on the items the
difficulty filter kept (0 < successes < k), equal-reward groups skipped; DPO on the (success, failure) pairs; SFT on
the successes (rejection sampling), both continuing the SFT adapter. A small validation slice cut from the end of the
training pool (``[grpo.<env>] validation``: never a held-out item; the SFT demonstrations include it, sampling,
GRPO, DPO and RFT never do) is evaluated during GRPO every few steps and after the last. KL is GRPO's to the base
model (TRL's reference for a LoRA policy: adapter off).
Held out, never sampled or trained on: HotpotQA questions 150..199 (50, all the sample has) and the 60 DB Bench
dev tasks.

Written to ``runs/learning_rl/``: ``learning_rl.json`` (everything, per-item outcomes included), ``learning_rl.md``
(the table), ``curves.html`` (GRPO reward, validation success and KL per step; DPO loss and margin per step).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("search", "sql")
METHODS = ("grpo", "dpo", "rft")

# sizes: full run / --quick (same code path)
FULL = {"heldout": {"search": 50, "sql": 60}, "sample_items": 48, "k": 4, "sample_new_tokens": 96,
        "grpo_steps": 6, "grpo_batch": 4, "grpo_accum": 4,  # 16 rollouts a step, 4 a pass (16 at once: 24 GB, OOM)
        "grpo_generations": 4, "grpo_beta": 0.01, "val": 8, "eval_every": 4,
        "dpo_steps": 24, "rft_steps": 12, "success": None}
QUICK = {"heldout": {"search": 4, "sql": 3}, "sample_items": 4, "k": 2, "sample_new_tokens": 48,
         "grpo_steps": 2, "grpo_batch": 4, "grpo_accum": 1, "grpo_generations": 2, "grpo_beta": 0.01, "val": 2,
         "eval_every": 1,
         "dpo_steps": 1, "rft_steps": 1,
         "success": ("format", 0.5)}  # a 2-step SFT never answers right: well-formed tool use makes the pairs


def success_key(env: str) -> str:
    """Return the env's headline success metric (search: em, SQL: em under AgentBench's rules)."""
    from agentrl.envs import registry

    return registry.get(env).success


def outcomes(out: Path, name: str, key: str) -> dict[str, float]:
    """Return ``{item id: success}`` of the evaluation ``out/eval/<name>``."""
    from agentrl.core.io import read_jsonl

    return {str(t["id"]): float((t.get("metrics") or {}).get(key) or 0.0)
            for t in read_jsonl(out / "eval" / name / "trajectories.jsonl")}


def grpo_layer(env: str, sizes: dict, adapter: str, quick: bool) -> dict:
    """Return the ``[grpo]`` layer of one environment's filtered run: the SFT adapter, KL logged (beta), equal-reward
    groups skipped, a validation slice at the end of the training pool (``[grpo.<env>] validation``: never sampled or
    trained on, evaluated every ``eval_every`` steps by :func:`validation_eval`, not by GRPO's held-out evaluation);
    for SQL the trainer values of its shorter episodes (benchmarks/learning.py's SQL_RUN) under this run's name."""
    from learning import SQL_RUN

    table: dict = {**(SQL_RUN if env == "sql" else {"env": env}), "name": f"rl_grpo_{env}", "adapter": adapter,
                   "max_steps": sizes["grpo_steps"], "per_device_train_batch_size": sizes["grpo_batch"],
                   "gradient_accumulation_steps": sizes["grpo_accum"], "num_generations": sizes["grpo_generations"],
                   "beta": sizes["grpo_beta"], "eval_questions": 0, "eval_every": sizes["eval_every"],
                   "skip_equal_groups": True, env: {"validation": sizes["val"]}}
    if quick:  # the training pool --quick's SFT demonstrations cover: 20 search questions, 14 SQL tasks
        table[env]["train"] = {"search": 20, "sql": 14}[env] - sizes["val"]
    return table


def validation_eval(preset, settings, rows: list[dict], out: Path, evals: list):
    """Return a TrainerCallback that runs the agent with the current policy (agentrl.train.grpo_eval.agent_eval, the
    environment as GRPO trains it, ``[eval.run]``'s batch) on the validation ``rows`` every ``settings.eval_every``
    steps and after the last one, appending each evaluation to ``evals`` (written to ``out/validation_evals.json``;
    trajectories under ``out/eval/step_<n>/``)."""
    from transformers import TrainerCallback

    from agentrl.core.io import write_json
    from agentrl.train.grpo import build_task
    from agentrl.train.grpo_eval import agent_eval

    task = build_task(settings, preset.data)

    class Validation(TrainerCallback):
        def run(self, state, model, tokenizer) -> None:
            if not rows or (evals and evals[-1]["step"] == state.global_step):
                return
            m = agent_eval(model, tokenizer, settings, task, preset.data, out / "eval", state.global_step, rows,
                           None, preset.eval().run)
            if m is not None:
                evals.append(m)
                write_json(out / "validation_evals.json", evals)

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if settings.eval_every and state.global_step % settings.eval_every == 0:
                self.run(state, model, processing_class)

        def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.run(state, model, processing_class)

    return Validation()


def run_env_methods(preset, env: str, sizes: dict, sft_adapter: str, runs: Path, timed, quick: bool) -> dict:
    """Sample, then GRPO (filtered), DPO and RFT for ``env``; return per method its adapter (or why it did not
    run) and its curves."""
    from agentrl.core.io import DataError
    from agentrl.data.pairs import export_pairs, export_successes
    from agentrl.envs import registry
    from agentrl.train.dpo import run_dpo
    from agentrl.train.grpo import run_grpo
    from agentrl.train.sample import run_sample, summary_line
    from agentrl.train.sft import run_sft

    res: dict = {}
    sample_dir = runs / "sample" / f"rl_{env}"
    key, minimum = sizes["success"] or (success_key(env), 1.0)
    p = preset.with_layer({"grpo": grpo_layer(env, sizes, sft_adapter, quick),
                           "sample": {"name": f"rl_{env}", "k": sizes["k"], "items": sizes["sample_items"],
                                      "max_new_tokens": sizes["sample_new_tokens"], "success_key": key,
                                      "success_min": minimum},
                           "dpo": {"name": f"rl_dpo_{env}", "data": str(sample_dir), "adapter": sft_adapter,
                                   "max_steps": sizes["dpo_steps"]}},
                          f"benchmarks/learning_rl.py ({env})")
    gate, grpo_settings, cfg = p.heldout, p.grpo(), p.sample()
    sample = timed(f"sample {env}", run_sample, cfg, grpo_settings, gate, p.data, runs=runs, source=p.describe())
    print(summary_line(sample, cfg.k), flush=True)
    res["sample"] = {"counts": sample["counts"], "kept": sample["kept"]}
    sample_dir = sample["out"]

    def attempt(method, fn):
        try:
            return fn()
        except DataError as exc:  # no kept item / pair / success: reported as measured, the others go on
            print(f"[learning_rl] {env} {method}: not run ({exc})", flush=True)
            res[method] = {"adapter": None, "why_not": str(exc)}
        except Exception as exc:  # an hour's other results are kept; the failure is in the table and the log
            import traceback

            traceback.print_exc()
            print(f"[learning_rl] {env} {method}: FAILED ({type(exc).__name__}: {exc})", flush=True)
            res[method] = {"adapter": None, "why_not": f"failed: {type(exc).__name__}: {exc}"}
        return None

    def grpo():
        settings = dataclasses.replace(grpo_settings, items=str(sample_dir))  # the items the difficulty filter kept
        spec = registry.get(settings.env)
        val = registry.split_rows(spec, "validation", settings.env_settings, p.data)
        evals: list = []
        r = run_grpo(settings, gate, p.data, runs=runs, overwrite=True, eval_run=p.eval().run, source=p.describe(),
                     callbacks=[validation_eval(p, settings, val, runs / "grpo" / settings.name, evals)])
        m = r.metrics
        res["grpo"] = {"adapter": str(r.out / "adapter"), "history": m["history"], "evals": evals,
                       "validation_ids": [str(v["id"]) for v in val], "train_rows": m["train_rows"]}

    def dpo():
        res["dpo_pairs"] = export_pairs(sample_dir, gate)
        m = run_dpo(p.dpo(), gate, runs=runs, source=p.describe())
        res["dpo"] = {"adapter": str(m["out"] / "adapter"), "history": m["history"], "counts": m["counts"]}

    def rft():
        res["rft_data"] = export_successes(sample_dir, gate)
        q = p.with_layer({"sft": {"name": f"rl_rft_{env}", "data": str(sample_dir / "successes"),
                                  "adapter": sft_adapter, "max_steps": sizes["rft_steps"], "check_questions": 0}},
                         f"benchmarks/learning_rl.py (RFT {env})")
        r = run_sft(q.sft(), q.heldout, None, q.data, runs=runs, overwrite=True, source=q.describe())
        res["rft"] = {"adapter": str(r.out / "adapter"), "loss": r.metrics["loss"],
                      "rows": r.metrics["counts"].get("rows")}

    for method, fn in (("grpo", grpo), ("dpo", dpo), ("rft", rft)):
        timed(f"{method} {env}", attempt, method, fn)
    return res


def compare(table: dict, per_item: dict) -> None:
    """Add to every method's row the paired difference to SFT on the same held-out items, with its 95% bootstrap
    interval (agentrl.core.bootstrap)."""
    from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci

    for env, models in per_item.items():
        ids = sorted(models["sft"])
        for name, items in models.items():
            mean, lo, hi = bootstrap_ci([items[i] for i in ids])
            row = table[env][name]
            row.update(success=round(mean, 4), success_ci=[round(lo, 4), round(hi, 4)])
            if name != "sft":
                d, dlo, dhi = paired_bootstrap_ci([models["sft"][i] for i in ids], [items[i] for i in ids])
                row.update(diff_vs_sft=round(d, 4), diff_ci=[round(dlo, 4), round(dhi, 4)])


def targets(result: dict) -> list[dict]:
    """Return the issue's targets with what was measured and met / missed: per env, the best method's paired
    difference to SFT (>= 0.05 with the interval's lower end above 0), and GRPO's mean reward over its last quarter of
    steps against its first."""
    rows = []
    for env, models in result["table"].items():
        diffs = [(r["diff_vs_sft"], r["diff_ci"][0], name) for name, r in models.items() if "diff_vs_sft" in r]
        if diffs:
            d, lo, name = max(diffs, key=lambda x: (x[1], x[0]))
            rows.append({"target": f"{env}: a method beats SFT by >= 0.05, interval above 0",
                         "measured": f"{name} {d:+.3f} (lower end {lo:+.3f})", "met": d >= 0.05 and lo > 0})
    for env, r in result["methods"].items():
        hist = [h["reward"] for h in (r.get("grpo") or {}).get("history", []) if h.get("reward") is not None]
        if hist:
            q = -(-len(hist) // 4)  # a quarter, rounded up: 6 steps compare 2 with 2
            first, last = sum(hist[:q]) / q, sum(hist[-q:]) / q
            rows.append({"target": f"{env}: GRPO mean reward, last quarter > first ({q} of {len(hist)} steps)",
                         "measured": f"{first:.3f} -> {last:.3f}", "met": last > first})
    return rows


def markdown(result: dict) -> str:
    """Return the table (success, paired difference to SFT with its interval) and the phase timings."""
    lines = [f"Command: `{result['command']}` ({result['total_minutes']} min, load {result['load']} at the start)", "",
             "| env | model | n | success (95% CI) | vs SFT (95% CI) | well-formed call share | note |",
             "|---|---|---|---|---|---|---|"]
    for env, models in result["table"].items():
        for name, r in models.items():
            if "success" not in r:
                lines.append(f"| {env} | {name} | - | - | - | - | not run: {r.get('why_not', '')[:80]} |")
                continue
            ci = f"{r['success']:.3f} [{r['success_ci'][0]:.3f}, {r['success_ci'][1]:.3f}]"
            diff = (f"{r['diff_vs_sft']:+.3f} [{r['diff_ci'][0]:+.3f}, {r['diff_ci'][1]:+.3f}]"
                    if "diff_vs_sft" in r else "-")
            lines.append(f"| {env} | {name} | {r['n']} | {ci} | {diff} | {r['wellformed_call_share']:.2f} | |")
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |" for t in targets(result)]
    lines += ["", "| phase | wall s |", "|---|---|"]
    lines += [f"| {k} | {v['seconds']} |" for k, v in result["phases"].items()]
    for env, r in result["methods"].items():
        lines.append("")
        lines.append(f"{env}: sample {r['sample']['counts']}")
        g = r.get("grpo") or {}
        if g.get("history"):
            lines.append(f"{env} GRPO reward per step: " + ", ".join(f"{h['reward']:.3f}" for h in g["history"]))
            lines.append(f"{env} GRPO groups skipped per step: "
                         + ", ".join(str(h.get("groups/skipped", "-")) for h in g["history"]))
    return "\n".join(lines) + "\n"


def curves(result: dict):
    """Return an altair chart: per env, GRPO's reward, validation success and KL per step, DPO's loss and margin."""
    import altair as alt
    import polars as pl

    rows = []
    for env, r in result["methods"].items():
        key = success_key(env)
        for h in (r.get("grpo") or {}).get("history", []):
            rows += [{"env": env, "step": h["step"], "series": s, "value": h[k]}
                     for s, k in (("GRPO reward", "reward"), ("GRPO KL", "kl")) if h.get(k) is not None]
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
    """Write ``learning_rl.md`` and ``curves.html`` of ``result`` under ``out`` and print the table."""
    from agentrl.core.io import write_text_atomic

    md = markdown(result)
    write_text_atomic(out / "learning_rl.md", md)
    curves(result).save(str(out / "curves.html"))
    print(md)


def report(out: Path) -> int:
    """Print and rewrite the table and curves of the finished run ``out/learning_rl.json``; return 0 (1 when the
    run has not finished)."""
    from agentrl.core.io import read_json

    path = out / "learning_rl.json"
    if not path.exists():
        print(f"error: {path} does not exist: run the benchmark first", file=sys.stderr)
        return 1
    publish(out, read_json(path))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the table; print and write it; return 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    p.add_argument("--quick", action="store_true", help="toy sizes, the same code path end to end")
    p.add_argument("--out", help="default runs/learning_rl (runs/learning_rl_quick with --quick)")
    p.add_argument("--report", action="store_true", help="print and rewrite the table of a finished run, train nothing")
    args = p.parse_args(argv)
    os.chdir(ROOT)
    out = Path(args.out or ("runs/learning_rl_quick" if args.quick else "runs/learning_rl"))
    if args.report:
        return report(out)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from agentrl.app.presets import load
    from agentrl.core.io import write_json
    from agentrl.data.pipeline import corpus_and_index
    from agentrl.train.smol import ensure_model
    from learning import Phases, demonstrations, evaluate, heldout, run_sft_phase

    preset = load(args.config)  # checked whole: a misspelt key stops before an hour of training
    sizes = QUICK if args.quick else FULL
    runs = out / "runs"
    start, load = time.perf_counter(), round(os.getloadavg()[0], 1)  # other work on the machine, before ours
    timed = Phases()
    new_tokens = preset.eval().local.max_new_tokens
    timed("prepare model", lambda: {"model": ensure_model(preset.sft().model.name)})
    timed("corpus + index", lambda: {"index": str(corpus_and_index(preset.settings("corpus"), preset.settings("index"),
                                                                   progress=False).index_dir)})
    held = heldout(preset, sizes["heldout"]["search"], sizes["heldout"]["sql"])
    timed("oracle demos + curation", demonstrations, preset, runs, 20 if args.quick else None,
          14 if args.quick else None)
    table: dict = {env: {} for env in ENVS}
    per_item: dict = {env: {} for env in ENVS}

    def eval_model(label: str, adapters: dict) -> dict:
        for env in adapters:  # an env missing: the method did not run there
            name = f"{env}_{label}"
            table[env][label] = evaluate(preset, env, held[env], adapters[env], name, out, new_tokens)
            per_item[env][label] = outcomes(out, name, success_key(env))
            print(f"[learning_rl] {env} {label}: {table[env][label]}", flush=True)
        return {}

    timed("eval base", eval_model, "base", {env: None for env in ENVS})
    sft = timed("sft", run_sft_phase, preset, runs, args.quick)
    timed("eval sft", eval_model, "sft", {env: sft["adapter"] for env in ENVS})
    methods = {env: run_env_methods(preset, env, sizes, sft["adapter"], runs, timed, args.quick)
               for env in ENVS}
    for m in METHODS:
        timed(f"eval {m}", eval_model, m, {env: methods[env][m]["adapter"] for env in ENVS
                                          if methods[env][m]["adapter"] is not None})
        for env in ENVS:
            if methods[env][m]["adapter"] is None:
                table[env][m] = {"why_not": methods[env][m]["why_not"]}
    compare(table, per_item)
    cmd = " ".join(["uv run python benchmarks/learning_rl.py", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": cmd, "config": args.config, "sizes": sizes, "load": load,
              "heldout": {k: [str(r["id"]) for r in v] for k, v in held.items()}, "table": table,
              "per_item": per_item, "methods": methods, "phases": dict(timed),
              "total_minutes": round((time.perf_counter() - start) / 60, 1)}
    result["targets"] = targets(result)
    write_json(out / "learning_rl.json", result)
    publish(out, result)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
