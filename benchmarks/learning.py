"""The learning table: SmolLM2-135M-Instruct base -> SFT -> GRPO on held-out items, on CPU (preset cpu_smol).

    uv run agentrl models prepare smollm2
    uv run python benchmarks/learning.py                 # ~40 min on a 2-core machine -> runs/learning/
    uv run python benchmarks/learning.py --smoke         # toy sizes, a few minutes -> runs/learning_smoke/
    uv run python benchmarks/learning.py --envs textgame,math   # base -> SFT per env, ~35 min -> runs/learning_envs/

Phases: the corpus and index (reused when present); oracle demonstrations on HotpotQA questions 0..149 and on
synthetic SQL tasks; curation + export; one LoRA SFT on both environments; GRPO from the SFT adapter per
environment (search: questions 0..149, answer F1 + format; SQL: synthetic tasks, execution + format).
Held out, never trained on: HotpotQA questions 150..199 (50) and DB Bench dev tasks (30, AgentBench's data is
evaluation only). Each model (base, SFT, GRPO) runs the agent on them with the batched local policy (greedy).

Printed and written to ``runs/learning/``: ``learning.json``, ``learning.md`` and ``learning.html`` (altair):
per environment and model, F1 / EM (SQL: em and exec), the share of episodes with a well-formed tool call, mean
tool calls, the share that gave an answer; per phase the wall time and, for training, trained tokens/s; the
SFT loss curve and GRPO's reward per step, with the issue's targets marked met or missed.

``--envs textgame,math`` runs base -> SFT for the text game and math instead (sizes: ``[demo_envs]``). Oracle
demonstrations on train-fold twc games (gold paths) and on GSM8K training problems (the reference solution's
calculations through the calculator); one LoRA SFT per environment (a text-game demonstration is ~2.5x as long
as a math one, so a shared run would pad most math rows to text-game length); held out: dev-fold twc games and
the math env's fixed evaluation slice (GSM8K's last 200 training problems). Writes ``learning_envs.json`` and
``learning_envs.md`` to ``runs/learning_envs/``: text game success / score / invalid actions, math accuracy /
answered share, the well-formed call share, and the SFT wall time and trained tokens/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.app.presets import Preset

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
    """Return the table row of one evaluation's metrics: answer scores (each env's own means, e.g. SQL exec,
    text-game success / score / invalid actions, math correct), tool-call shape and answered share."""
    o, t, n = metrics["overall"], metrics["tools"], max(1, metrics["n"])
    row = {"n": metrics["n"], "f1": o.get("f1"), "em": o.get("em"),
           "wellformed_call_share": t["episodes_with_wellformed_call"], "mean_calls": t["mean_calls"],
           "answered_share": round(metrics["finish"].get("answer", 0) / n, 4)}
    for key in ("exec", "success", "score", "invalid_actions", "steps", "correct", "calculator_calls"):
        if key in o:
            row[key] = o[key]
    row["wellformed_of_calls"] = t["wellformed_call_share"]
    return row


def evaluate(preset: Preset, env: str, rows: list[dict], adapter: str | None, name: str, out: Path,
             max_new_tokens: int, max_turns: int | None = None, batch: int | None = None) -> dict:
    """Run the batched local policy (base model + ``adapter``) on the held-out ``rows`` (``[eval]`` and its
    ``[eval.<env>]`` table, ``max_turns`` replacing the table's when given); return the table row (with the
    evaluation's wall time). ``batch`` sets both the concurrent episodes and the prompts per generate call."""
    from agentrl.rollout.evaluate import run_eval, variant

    cfg = variant(preset.eval(), name=name, env=env, policy="local", split="heldout", qa=None, offset=0, limit=None,
                  adapter=adapter, max_new_tokens=max_new_tokens)
    if max_turns:
        cfg.envs = {**cfg.envs, env: dataclasses.replace(cfg.env_settings, max_turns=max_turns)}
    if batch:
        cfg.run = dataclasses.replace(cfg.run, concurrency=batch)
        cfg.local = dataclasses.replace(cfg.local, max_batch=batch)
    t = time.perf_counter()
    m = run_eval(cfg, preset.data, rows=rows, overwrite=True, out_dir=out / "eval" / name)
    return {**scores(m), "seconds": round(time.perf_counter() - t, 1)}


def heldout(preset: Preset, n_search: int | None, n_sql: int) -> dict[str, list[dict]]:
    """Return the held-out rows: the first ``n_search`` of the search environment's ``heldout`` split (``[eval.search]
    heldout``: the last questions of the QA file; None: all of them) and ``n_sql`` of the SQL environment's (DB Bench
    dev tasks), spread over the file."""
    from agentrl.rollout.evaluate import load_rows, variant

    def split(env: str, limit: int | None = None) -> list[dict]:
        cfg = variant(preset.eval(), env=env, split="heldout", qa=None, offset=0, limit=limit)
        return load_rows(cfg, preset.data)

    tasks = split("sql")
    sql = tasks[::max(1, len(tasks) // n_sql)][:n_sql]  # a spread over SELECT and INSERT/UPDATE/DELETE tasks
    return {"search": split("search", n_search), "sql": sql}


def oracle(preset: Preset, runs: Path, name: str, rows: list[dict] | None = None, **changes) -> dict:
    """Run the oracle policy (``[eval]`` with ``changes``: EvalConfig fields, e.g. env, split, limit; on ``rows``
    when given) into ``runs/eval/<name>``; return its metrics."""
    from agentrl.rollout.evaluate import run_eval, variant

    cfg = variant(preset.eval(), name=name, policy="oracle", **changes)
    return run_eval(cfg, preset.data, runs=runs, rows=rows, overwrite=True)


def curate_export(preset: Preset, runs: Path, names: list[str], **changes) -> tuple[Path, dict]:
    """Curate the oracle runs ``names`` with ``[data]`` (plus ``changes``) through the preset's held-out gate and
    export them; return the data directory and the curation report."""
    from agentrl.data.curate import curate
    from agentrl.data.export import FORMATS, export

    cfg = dataclasses.replace(preset.curate(), **changes)
    data = runs / "data" / cfg.name
    report = curate([runs / "eval" / n for n in names], cfg, data, preset.heldout)
    export(data, FORMATS)
    return data, report


def demonstrations(preset: Preset, runs: Path, n_search: int | None, n_sql: int | None) -> dict:
    """Oracle demonstrations (the search environment's ``train`` split: the questions before the held-out ones, the
    first ``n_search`` of them when given; the SQL environment's: synthetic tasks), curated + exported; return the
    oracles' scores and the rows written."""
    search = oracle(preset, runs, "smol_search_oracle", env="search", split="train", qa=None, offset=0, limit=n_search)
    sql = oracle(preset, runs, "smol_sql_oracle", env="sql", split="train", qa=None, offset=0, limit=n_sql)
    _, report = curate_export(preset, runs, ["smol_search_oracle", "smol_sql_oracle"])
    return {"search_oracle_f1": search["overall"]["f1"], "sql_oracle_em": sql["overall"]["em"],
            "written": report["written"]}


def env_preset(preset: Preset, sizes: dict, smoke: bool) -> tuple[Preset, dict[str, int]]:
    """Return the preset of the ``--envs`` part and its sizes: ``[eval.textgame]`` generating the train-fold and
    dev-fold games it runs, ``[eval.math]`` reading its training problems from ``sizes["math_train"]`` and giving an
    episode the 4 turns ``[eval.run] max_turns`` gave every environment before the environments owned their settings
    (unless the preset's ``[eval.math]`` sets max_turns); the held-out set is the layered preset's (math: every problem
    of the env's fixed evaluation slice, not only those scored)."""
    n = {"tg_train": 6, "tg_held": 2, "math_train": 12, "math_held": 3} if smoke else {
        "tg_train": sizes["textgame_train_games"], "tg_held": sizes["textgame_heldout_games"],
        "math_train": sizes["math_train_problems"], "math_held": sizes["math_heldout_problems"]}
    math = {"train_qa": sizes["math_train"]}
    if preset.eval().envs.get("math") is None or preset.eval().envs["math"].max_turns is None:
        math["max_turns"] = 4
    layer = {"eval": {"textgame": {"train": n["tg_train"], "heldout": n["tg_held"]}, "math": math}}
    return preset.with_layer(layer, "benchmarks/learning.py --envs"), n


def env_rows(preset: Preset, n: dict[str, int]) -> dict[str, dict[str, list[dict]]]:
    """Return ``{"textgame" | "math": {"train": rows, "heldout": rows}}`` from each environment's splits, the two sides
    never overlapping.

    Text game: train-fold twc seeds 0.. and dev-fold seeds 0.. (the game generator keeps folds disjoint).
    Math: held out, the first problems of the env's fixed evaluation slice (GSM8K's last 200 training
    problems); train, ``n["math_train"]`` of ``train_qa`` without any held-out problem (the preset's gate)."""
    from agentrl.envs import registry

    def split(env: str, name: str) -> list[dict]:
        spec = registry.get(env)
        return registry.split_rows(spec, name, preset.eval().envs.get(env) or spec.settings(), preset.data)

    train = preset.heldout.drop(split("math", "train"), "math training problems")
    if len(train) < n["math_train"]:
        print(f"[learning] {preset.eval().envs['math'].train_qa}: {len(train)} training problems "
              f"(< {n['math_train']})")
    return {"textgame": {"train": split("textgame", "train"), "heldout": split("textgame", "heldout")},
            "math": {"train": train[:n["math_train"]], "heldout": split("math", "heldout")[:n["math_held"]]}}


def run_sft_phase(preset: Preset, runs: Path, smoke: bool, data: str | None = None, **changes) -> dict:
    """Run LoRA SFT (``[sft]`` with ``changes``, e.g. name, max_steps, max_length) on the curated ``data``
    (default ``[data]``'s) through the preset's held-out gate; return the adapter path, loss curve, wall and train
    seconds, trained tokens/s."""
    from agentrl.train.sft import run_sft

    table = {"data": data or str(runs / "data" / preset.curate().name), **changes}
    if smoke:
        table.update(max_steps=2, logging_steps=1)
    p = preset.with_layer({"sft": table}, "benchmarks/learning.py")
    tokens = token_counter()
    t = time.perf_counter()
    res = run_sft(p.sft(), p.heldout, p.eval(), p.data, runs=runs, callbacks=[tokens], source=p.describe())
    seconds = time.perf_counter() - t
    m = res.metrics
    return {"adapter": str(res.out / "adapter"), "steps": m["steps"], "loss": m["loss"], "seconds": round(seconds, 1),
            "train_seconds": m["train_seconds"], "trained_tokens": tokens.num_tokens,
            "tokens_per_s": round(tokens.num_tokens / max(m["train_seconds"], 1e-9), 1), "counts": m["counts"]}


# the SQL GRPO run: [grpo] with the [grpo.sql] environment, the trainer values its shorter episodes take (what the
# preset's [grpo_sql] table set before the environments owned their settings)
SQL_RUN = {"env": "sql", "name": "smol_grpo_sql", "max_completion_length": 256, "max_tool_calling_iterations": 2}


def grpo_preset(preset: Preset, env: str, adapter: str, smoke: bool) -> Preset:
    """Return the preset of one environment's GRPO run: ``[grpo]`` from the SFT ``adapter``, for SQL with
    :data:`SQL_RUN`."""
    table: dict = {"adapter": adapter, **(SQL_RUN if env == "sql" else {"env": env})}
    if smoke:
        table["max_steps"] = 1
    return preset.with_layer({"grpo": table}, f"benchmarks/learning.py (GRPO {env})")


def run_grpo_phase(preset: Preset, env: str, adapter: str, runs: Path, smoke: bool) -> dict:
    from agentrl.train.grpo import run_grpo

    p = grpo_preset(preset, env, adapter, smoke)
    tokens = token_counter()
    t = time.perf_counter()
    res = run_grpo(p.grpo(), p.heldout, p.data, runs=runs, callbacks=[tokens], eval_run=p.eval().run,
                   source=p.describe())
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


def phase_lines(phases: dict) -> list[str]:
    """Return the markdown lines of the phase table: wall time, steps, trained tokens and tokens/s."""
    lines = ["", "| phase | wall s | steps | trained tokens | trained tokens/s (GRPO: rollouts included) |",
             "|---|---|---|---|---|"]
    for name, p in phases.items():
        lines.append(f"| {name} | {p['seconds']} | {p.get('steps', '-')} | {int(p.get('trained_tokens', 0)) or '-'} "
                     f"| {p.get('tokens_per_s', '-')} |")
    return lines


def loss_line(label: str, sft: dict) -> str:
    """Return one line with an SFT phase's logged loss per step ("" when none was logged)."""
    return f"{label} loss: " + ", ".join(f"{x['step']}: {x['loss']:.3f}" for x in sft["loss"]) if sft["loss"] else ""


def target_lines(rows: list[dict]) -> list[str]:
    """Return the markdown lines of the targets table."""
    return ["", "| target | measured | threshold | met |", "|---|---|---|---|"] + [
        f"| {t['target']} | {t['measured']} | {t['threshold']} | {'yes' if t['met'] else 'no'} |" for t in rows]


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
    lines += phase_lines(result["phases"])
    lines += ["", loss_line("SFT", result["phases"]["sft"])]
    for env in ("search", "sql"):
        g = result["phases"][f"grpo_{env}"]
        lines.append(f"GRPO {env} reward per step: " + ", ".join(f"{h['reward']:.3f}" for h in g["history"]))
    lines += target_lines(result["targets"])
    return "\n".join(lines) + "\n"


def env_targets(table: dict) -> list[dict]:
    """Return the text game's and math's checks (SFT well-formed call share >= 0.9, SFT above base on the
    env's headline metric) with the measured values and met / missed."""
    rows = []
    for env, key in (("textgame", "success"), ("math", "correct")):
        base, sft = table[env]["base"], table[env]["sft"]
        for name, v, th, met in (
                (f"SFT well-formed tool-call share >= 0.9 ({env})", sft["wellformed_call_share"], 0.9, None),
                (f"SFT {key} > base ({env})", sft[key], base[key], sft[key] > base[key]),
                (f"SFT answered share >= 0.9 ({env})", sft["answered_share"], 0.9, None)):
            rows.append({"target": name, "measured": round(v, 4), "threshold": round(th, 4),
                         "met": v >= th if met is None else met})
    return rows


def env_markdown(result: dict) -> str:
    """Return the text game's and math's base -> SFT table, the phase timings and the checks as markdown."""
    def f(r, key, fmt):
        return format(r[key], fmt) if key in r else "-"

    lines = [f"Command: `{result['command']}` ({result['total_minutes']} min)", "",
             "| env | model | n | success / correct | score | answered share | well-formed call share "
             "| calls well-formed | mean calls | invalid actions | eval s |", "|---" * 11 + "|"]
    for env, models in result["table"].items():
        for name, r in models.items():
            headline = r.get("success", r.get("correct"))
            lines.append(f"| {env} | {name} | {r['n']} | {headline:.3f} | {f(r, 'score', '.3f')} | "
                         f"{r['answered_share']:.2f} | {r['wellformed_call_share']:.2f} | "
                         f"{r['wellformed_of_calls']:.2f} | {r['mean_calls']:.2f} | {f(r, 'invalid_actions', '.2f')} | "
                         f"{r['seconds']} |")
    lines += phase_lines(result["phases"])
    lines += [""] + [loss_line(f"SFT {env}", result["phases"][f"sft_{env}"]) for env in result["table"]]
    lines += target_lines(result["targets"])
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


class Phases(dict):
    """Per-phase results with wall times; calling it runs one phase, records and prints it."""

    def __call__(self, phase, fn, *a, **kw):
        """Run ``fn(*a, **kw)`` as ``phase``; record its result dict with ``seconds`` and return the result."""
        t = time.perf_counter()
        res = fn(*a, **kw)
        self[phase] = {**(res if isinstance(res, dict) else {}), "seconds": round(time.perf_counter() - t, 1)}
        print(f"[learning] {phase}: {self[phase]['seconds']} s", flush=True)
        return res


def search_sql(args, preset: Preset, out: Path, timed: Phases) -> dict:
    """Run base -> SFT -> GRPO for search and SQL; return the result's table, held-out ids and targets."""
    from agentrl.data.pipeline import corpus_and_index

    runs = out / "runs"  # every phase's run directories, apart from other presets'
    # held out: the search environment's heldout split ([eval.search] heldout: all of it) and DB Bench dev tasks
    n_search, n_sql = (4, 3) if args.smoke else (None, preset.demo().sql_heldout_tasks)
    new_tokens = preset.eval().local.max_new_tokens
    timed("corpus + index", lambda: {"index": str(corpus_and_index(preset.settings("corpus"), preset.settings("index"),
                                                                   progress=False).index_dir)})
    held = heldout(preset, n_search, n_sql)
    timed("oracle demos + curation", demonstrations, preset, runs, 20 if args.smoke else None,
          14 if args.smoke else None)
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
    return {"heldout": {k: [r["id"] for r in v] for k, v in held.items()}, "table": table,
            "targets": targets(table, {"search": timed["grpo_search"], "sql": timed["grpo_sql"]})}


def other_envs(args, preset: Preset, out: Path, timed: Phases) -> dict:
    """Run base -> SFT (one LoRA SFT per environment) for the text game and math on held-out items; return the
    result's table, held-out ids and checks."""
    sizes = dataclasses.asdict(preset.demo_envs())
    if args.math_train:
        sizes["math_train"] = args.math_train
    runs = out / "runs"
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    if sorted(envs) != ["math", "textgame"]:
        raise SystemExit(f"--envs: textgame,math is what this part runs (got {args.envs!r})")
    preset, n = env_preset(preset, sizes, args.smoke)
    rows = {}
    timed("tasks", lambda: rows.update(env_rows(preset, n)))
    sft_steps = {"textgame": sizes["textgame_sft_steps"], "math": sizes["math_sft_steps"]}
    run = {"textgame": {"max_turns": sizes["textgame_max_turns"], "batch": sizes["textgame_batch"],
                        "max_new_tokens": sizes["textgame_max_new_tokens"]},
           "math": {"max_turns": None, "batch": None, "max_new_tokens": sizes["math_max_new_tokens"]}}
    table: dict = {env: {} for env in envs}
    data = {}

    def demos(env):
        m = oracle(preset, runs, f"smol_{env}_oracle", rows[env]["train"], env=env, split="train", qa=None, offset=0,
                   limit=None)
        data[env], report = curate_export(preset, runs, [f"smol_{env}_oracle"], name=f"smol_sft_{env}",
                                          balance_by=[])  # tool-call counts are the task's, not a skew
        return {"oracle_success": m["overall"]["em"], "written": report["written"]}

    def eval_env(env, label, adapter):
        r = run[env]
        table[env][label] = evaluate(preset, env, rows[env]["heldout"], adapter, f"{env}_{label}", out,
                                     r["max_new_tokens"], r["max_turns"], r["batch"])
        print(f"[learning] {env} {label}: {table[env][label]}", flush=True)
        return {}

    for env in envs:
        timed(f"oracle demos + curation {env}", demos, env)
    for env in envs:
        timed(f"eval base {env}", eval_env, env, "base", None)
    for env in envs:
        sft = timed(f"sft_{env}", run_sft_phase, preset, runs, args.smoke, str(data[env]), name=f"smol_sft_{env}",
                    max_steps=sft_steps[env], max_length=sizes["sft_max_length"])
        timed(f"eval sft {env}", eval_env, env, "sft", sft["adapter"])
    return {"heldout": {env: {"source": "twc dev fold" if env == "textgame" else preset.eval().envs["math"].qa,
                              "ids": [r["id"] for r in rows[env]["heldout"]]} for env in envs},
            "train": {env: [r["id"] for r in rows[env]["train"]] for env in envs},
            "sizes": sizes, "table": table, "targets": env_targets(table)}


def main(argv: list[str] | None = None) -> int:
    """Run the learning table (search and SQL, or with ``--envs`` the text game and math); return 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    p.add_argument("--smoke", action="store_true", help="toy sizes, to check the script end to end")
    p.add_argument("--envs", help="textgame,math: base -> SFT for these environments instead of search and SQL")
    p.add_argument("--math-train", help="GSM8K-layout file of math demonstrations (default [demo_envs].math_train)")
    p.add_argument("--out", help="default runs/learning or runs/learning_envs (+ _smoke with --smoke)")
    args = p.parse_args(argv)
    os.chdir(ROOT)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")
    from agentrl.app.presets import load as load_preset  # the preset checked whole, as the CLI reads it
    from agentrl.core.io import write_json, write_text_atomic
    from agentrl.train.smol import ensure_model

    preset = load_preset(args.config)
    stem = "learning_envs" if args.envs else "learning"
    out = Path(args.out or (f"runs/{stem}_smoke" if args.smoke else f"runs/{stem}"))
    start = time.perf_counter()
    timed = Phases()
    timed("prepare model", lambda: {"model": ensure_model(preset.sft().model.name)})
    part = other_envs(args, preset, out, timed) if args.envs else search_sql(args, preset, out, timed)
    cmd = " ".join(["uv run python benchmarks/learning.py", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": cmd, "config": args.config, **part, "phases": dict(timed),
              "total_minutes": round((time.perf_counter() - start) / 60, 1)}
    write_json(out / f"{stem}.json", result)
    md = env_markdown(result) if args.envs else markdown(result)
    write_text_atomic(out / f"{stem}.md", md)
    if not args.envs:
        chart(result).save(str(out / "learning.html"))
    print(md)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
