"""The learning benchmark: SmolLM2-135M-Instruct base -> SFT -> {GRPO, DPO, rejection-sampling SFT} on held-out items
of each environment, with 95% bootstrap intervals and paired differences to SFT (preset cpu_smol, CPU).

    uv run agentrl models prepare smollm2
    uv run python benchmarks/learning.py                        # SQL and the text game -> runs/learning/
    uv run python benchmarks/learning.py --envs search          # HotpotQA search: near a 135M model's floor
    uv run python benchmarks/learning.py --envs sql --sql-heldout my_tasks.jsonl   # any DB Bench-layout file held out
    uv run python benchmarks/learning.py --envs textgame,math   # text game: base -> SFT -> GRPO; math: base -> SFT
    uv run python benchmarks/learning.py --quick                # toy sizes, the same code path -> runs/learning_quick/
    uv run python benchmarks/learning.py --report               # print a finished run's table again, train nothing

Per environment, one after the other: oracle demonstrations on its training split -> curation + export -> one LoRA
SFT on them (search, SQL: one epoch of the curated demonstrations; text game, math: ``[demo_envs]``' steps) ->
``sample``: k attempts per training item with the SFT adapter at GRPO's temperature -> GRPO from the SFT adapter on
the items the difficulty filter kept (0 < successes < k; SQL: on tables of another generator seed than the
demonstrations', which the SFT adapter would nearly always solve), equal-reward groups skipped, KL logged; DPO on
the (success, failure) pairs; SFT on the successes (rejection sampling), both continuing the SFT adapter. GRPO,
DPO and RFT run on search and SQL (``--methods``). The text game: GRPO from its SFT adapter on the game's score
(dense, so no difficulty filter: equal-score groups are skipped) on train-fold games after the demonstrated seeds;
its table's per-item outcome is the score (no held-out game is solved). Math runs base -> SFT.
A validation slice cut from the end of the training pool (``[grpo.<env>] validation``: never a held-out item;
sampling, GRPO, DPO and RFT never see it) is evaluated during GRPO every few steps and after the last.
Held out, never demonstrated, sampled or trained on (the preset's held-out gate drops them from every training
path): search, the QA file's last questions (``[eval.search] heldout``); SQL, every task of a DB Bench-layout file
(``--sql-heldout``, default AgentBench's DB Bench dev, scored by AgentBench's rules); the text game, dev-fold games by
seed; math, the env's fixed evaluation slice. Each model runs the agent on them with the batched local policy, greedy.

Written to ``runs/learning/``: ``learning.json`` (everything, per-item outcomes included), ``learning.md`` (the
table, the targets, the phase timings) and ``curves.html`` (GRPO reward, validation success, KL and cut-by-length
share per step; DPO loss and margin per step). Sizes: :data:`FULL` / :data:`QUICK` and the preset's ``[demo_envs]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.app.presets import Preset

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("search", "sql", "textgame", "math")
METHODS = ("grpo", "dpo", "rft")
# where each method is built and measured (the text game's DPO / RFT would need a success threshold on its score)
METHOD_ENVS = {"grpo": ("search", "sql", "textgame"), "dpo": ("search", "sql"), "rft": ("search", "sql")}
# the per-item outcome of the table where it is not the env's success: the text game's score (partial progress,
# 0.25 per object taken or put away), since SmolLM2 solves no held-out game before or after SFT
OUTCOME = {"textgame": "score"}

# sizes: full run / --quick (the same code path at toy sizes)
FULL = {"heldout": {"search": None, "sql": None}, "demos": {"search": None, "sql": None}, "sft_steps": None,
        "sample_items": 48, "k": 4,
        "grpo_steps": 6, "grpo_batch": 4, "grpo_accum": 4,  # 16 rollouts a step, 4 a pass (16 at once: 24 GB, OOM)
        "grpo_generations": 4, "grpo_beta": 0.01, "val": 16, "eval_every": 4,
        "dpo_steps": 24, "rft_steps": 12, "success": None}
QUICK = {"heldout": {"search": 4, "sql": 3}, "demos": {"search": 20, "sql": 14}, "sft_steps": 10,
         "sample_items": 4, "k": 2,
         "grpo_steps": 2, "grpo_batch": 4, "grpo_accum": 1, "grpo_generations": 2, "grpo_beta": 0.01, "val": 2,
         "eval_every": 1, "dpo_steps": 1, "rft_steps": 1,
         "success": ("format", 0.5)}  # a 2-step SFT never answers right: well-formed tool use makes the pairs
# how each environment's GRPO runs here. ``filtered``: on the items the difficulty filter kept (binary success: the
# filter finds the items with signal); the text game plays its pool unfiltered (its score is dense: groups of equal
# scores are skipped). ``grpo``: its [grpo] values (a two-call SQL episode reaches ~250 tokens; a text-game turn is
# ~40 model tokens + ~130 of observation, and 6 actions take and put away both objects after "look around").
# ``env``: its [grpo.<env>] values (SQL: tables of another generator seed than the demonstrations': on its own
# demonstrations' tasks the SFT adapter succeeds in nearly every rollout, which leaves GRPO no signal; its lr 3e-5
# and 6 steps are what benchmarks/sql_sweep.py chose on the validation slice, docs/results.md). ``full``: a
# full run's sizes over FULL's (the text game: 2 games x 4 rollouts a step, ~125 s each, 16 steps on 32 training
# games the SFT never saw, 8 validation games). The text game's learning rate 1e-4 is not swept: at the preset's 3e-5
# SQL's KL stayed below 0.001 over 6 steps, at 1e-4 it reached 0.008-0.022 over 40 with the call format kept.
GRPO_RUN = {
    "search": {"filtered": True},
    "sql": {"filtered": True, "grpo": {"max_completion_length": 256, "max_tool_calling_iterations": 2},
            "env": {"synthetic_seed": 1}},
    "textgame": {"filtered": False,
                 "grpo": {"max_completion_length": 1024, "max_tool_calling_iterations": 6, "learning_rate": 1e-4,
                          "model": {"max_seq_length": 1408}},
                 "full": {"grpo_steps": 16, "grpo_accum": 2, "val": 8, "eval_every": 8, "train": 32}},
}

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
    text-game score / invalid actions and ``solved``, its games solved; math correct), tool-call shape and answered
    share (``success`` is left to learning_report.compare: the mean of the table's per-item outcome)."""
    o, t, n = metrics["overall"], metrics["tools"], max(1, metrics["n"])
    row = {"n": metrics["n"], "f1": o.get("f1"), "em": o.get("em"),
           "wellformed_call_share": t["episodes_with_wellformed_call"], "mean_calls": t["mean_calls"],
           "answered_share": round(metrics["finish"].get("answer", 0) / n, 4)}
    for key in ("exec", "score", "invalid_actions", "steps", "correct", "calculator_calls"):
        if key in o:
            row[key] = o[key]
    if "success" in o:
        row["solved"] = o["success"]
    row["wellformed_of_calls"] = t["wellformed_call_share"]
    return row


def evaluate(preset: Preset, env: str, rows: list[dict], adapter: str | None, name: str, out: Path,
             batch: int | None = None) -> dict:
    """Run the batched local policy (base model + ``adapter``) on the held-out ``rows`` (``[eval]`` and its
    ``[eval.<env>]`` table: the environment's evaluation budget, which GRPO's evaluations read too; ``batch``
    concurrent episodes when given); return the table row (with the evaluation's wall time)."""
    from agentrl.rollout.evaluate import run_eval, variant

    cfg = variant(preset.eval(), name=name, env=env, policy="local", split="heldout", qa=None, offset=0, limit=None,
                  adapter=adapter)
    if batch:
        cfg.run = dataclasses.replace(cfg.run, concurrency=batch)
        cfg.local = dataclasses.replace(cfg.local, max_batch=batch)
    t = time.perf_counter()
    m = run_eval(cfg, preset.data, rows=rows, overwrite=True, out_dir=out / "eval" / name)
    return {**scores(m), "seconds": round(time.perf_counter() - t, 1)}


def outcomes(out: Path, name: str, key: str) -> dict[str, float]:
    """Return ``{item id: success}`` of the evaluation ``out/eval/<name>``."""
    from agentrl.core.io import read_jsonl

    return {str(t["id"]): float((t.get("metrics") or {}).get(key) or 0.0)
            for t in read_jsonl(out / "eval" / name / "trajectories.jsonl")}


def split(preset: Preset, env: str, name: str) -> list[dict]:
    """Return ``env``'s rows of the split ``name`` under the preset's ``[eval.<env>]`` table."""
    from agentrl.envs import registry

    spec = registry.get(env)
    return registry.split_rows(spec, name, preset.eval().envs.get(env) or spec.settings(), preset.data)


def split_source(preset: Preset, env: str) -> str:
    """Return the file ``env``'s held-out items come from under the preset (its ``[eval.<env>]`` ``qa``)."""
    from agentrl.envs import registry

    return str((preset.eval().envs.get(env) or registry.get(env).settings()).qa)


def heldout_rows(preset: Preset, env: str, n: int | None) -> list[dict]:
    """Return ``env``'s held-out rows: search, the first ``n`` of its heldout split (None: all); SQL, ``n`` tasks
    spread over the file (SELECT and INSERT/UPDATE/DELETE alike; None: all); the text game and math, the preset's
    (:func:`env_preset`: dev-fold games, the first problems of the evaluation slice)."""
    rows = split(preset, env, "heldout")
    if env == "sql" and n:
        return rows[::max(1, len(rows) // n)][:n]
    return rows[:n] if n else rows


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
    export(data, FORMATS, preset.heldout)
    return data, report


def run_sft_phase(preset: Preset, runs: Path, smoke: bool, data: str | None = None, **changes) -> dict:
    """Run LoRA SFT (``[sft]`` with ``changes``, e.g. name, max_steps, max_length) on the curated ``data``
    (default ``[data]``'s) through the preset's held-out gate; return the adapter path, loss curve, wall and train
    seconds, trained tokens/s. ``smoke``: 2 steps unless ``changes`` give max_steps, every step logged."""
    from agentrl.train.sft import run_sft

    table = {"data": data or str(runs / "data" / preset.curate().name), **changes}
    if smoke:
        table.update(max_steps=changes.get("max_steps", 2), logging_steps=1)
    p = preset.with_layer({"sft": table}, "benchmarks/learning.py")
    tokens = token_counter()
    t = time.perf_counter()
    res = run_sft(p.sft(), p.heldout, p.eval(), p.data, runs=runs, callbacks=[tokens], source=p.describe())
    seconds = time.perf_counter() - t
    m = res.metrics
    return {"adapter": str(res.out / "adapter"), "steps": m["steps"], "loss": m["loss"], "seconds": round(seconds, 1),
            "train_seconds": m["train_seconds"], "trained_tokens": tokens.num_tokens,
            "tokens_per_s": round(tokens.num_tokens / max(m["train_seconds"], 1e-9), 1), "counts": m["counts"]}


def env_preset(preset: Preset, sizes: dict, quick: bool, envs: list[str]) -> Preset:
    """Return ``preset`` with this benchmark's tables of the text game and math where they are in ``envs``:
    ``[eval.textgame]`` generating the train-fold and dev-fold games it runs, ``[eval.math]`` reading its training
    problems from ``sizes["math_train"]`` with the 4 turns an episode had before the environments owned their
    settings (unless the preset sets max_turns) and ``sizes["math_heldout_problems"]`` held out."""
    n = ({"tg_train": 6, "tg_held": 2, "math_held": 3} if quick else
         {"tg_train": sizes["textgame_train_games"], "tg_held": sizes["textgame_heldout_games"],
          "math_held": sizes["math_heldout_problems"]})
    tables: dict = {}
    if "textgame" in envs:
        tables["textgame"] = {"train": n["tg_train"], "heldout": n["tg_held"]}
    if "math" in envs:
        tables["math"] = {"train_qa": sizes["math_train"], "heldout": n["math_held"]}
        if preset.eval().envs.get("math") is None or preset.eval().envs["math"].max_turns is None:
            tables["math"]["max_turns"] = 4
    return preset.with_layer({"eval": tables}, "benchmarks/learning.py (text game, math)") if tables else preset


class Phases(dict):
    """Per-phase results with wall times; calling it runs one phase, records and prints it."""

    env: str | None = None  # the environment the next phases run for (their minutes count against its 60)

    def __call__(self, phase, fn, *a, **kw):
        """Run ``fn(*a, **kw)`` as ``phase``, then release the memory it freed (agentrl.core.memory); record its
        result dict with ``seconds`` and the environment it ran for (:attr:`env`), and return the result."""
        from agentrl.core.memory import release_freed_memory

        t = time.perf_counter()
        res = fn(*a, **kw)
        release_freed_memory()  # what the phase freed goes back to the system: one process runs every phase
        self[phase] = {**(res if isinstance(res, dict) else {}), "seconds": round(time.perf_counter() - t, 1),
                       "env": self.env}
        print(f"[learning] {phase}: {self[phase]['seconds']} s", flush=True)
        return res


def grpo_layer(preset: Preset, env: str, sizes: dict, adapter: str, quick: bool) -> dict:
    """Return the ``[grpo]`` layer of one environment's run: the SFT adapter, KL logged (beta), equal-reward groups
    skipped, a validation slice (``[grpo.<env>] validation``: never sampled or trained on, evaluated every
    ``eval_every`` steps by :func:`validation_eval`, not by GRPO's held-out evaluation), the env's trainer values
    and sizes (:data:`GRPO_RUN`); training items the SFT demonstrations never showed: SQL, synthetic tables of another
    generator seed; the text game, train-fold games after the demonstrated seeds, its validation games played with the
    held-out evaluation's turns and tokens."""
    run = GRPO_RUN[env]
    if not quick:
        sizes = {**sizes, **run.get("full", {})}
    table: dict = {**run.get("grpo", {}), "env": env, "name": f"learning_grpo_{env}", "adapter": adapter,
                   "max_steps": sizes["grpo_steps"], "per_device_train_batch_size": sizes["grpo_batch"],
                   "gradient_accumulation_steps": sizes["grpo_accum"], "num_generations": sizes["grpo_generations"],
                   "beta": sizes["grpo_beta"], "eval_questions": 0, "eval_every": sizes["eval_every"],
                   "skip_equal_groups": True, env: {**run.get("env", {}), "validation": sizes["val"]}}
    if env == "textgame":  # the games after the demonstrated ones: a full run's pool, or as many as demonstrated
        demos = preset.eval().envs["textgame"].train
        table[env].update(train=sizes.get("train", demos), train_from=demos)  # [eval.textgame]'s budget evaluates
    elif quick:  # a training pool of --quick's size
        table[env]["train"] = sizes["demos"][env] - sizes["val"]
    return table


def validation_eval(preset, settings, rows: list[dict], out: Path, evals: list):
    """Return a TrainerCallback that runs the agent with the current policy (agentrl.train.grpo_eval.agent_eval, the
    environment as GRPO trains it, ``[eval.run]``'s batch) on the validation ``rows`` before the first step, every
    ``settings.eval_every`` steps and after the last one, appending each evaluation to ``evals`` (written to
    ``out/validation_evals.json``; trajectories under ``out/eval/step_<n>/``)."""
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

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.run(state, model, processing_class)  # step 0: the SFT adapter, the curve's baseline

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if settings.eval_every and state.global_step % settings.eval_every == 0:
                self.run(state, model, processing_class)

        def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.run(state, model, processing_class)

    return Validation()


def run_methods(preset: Preset, env: str, sizes: dict, methods: list[str], sft_adapter: str, runs: Path, timed,
                quick: bool) -> dict:
    """Sample (where GRPO filters by difficulty or DPO / RFT need pairs), then each of ``methods`` (GRPO on the kept
    items or, for the text game, on its training games; DPO, RFT) for ``env``; return per method its adapter (or why
    it did not run) and its curves."""
    from agentrl.core.io import DataError
    from agentrl.data.pairs import export_pairs, export_successes
    from agentrl.envs import registry
    from agentrl.train.dpo import run_dpo
    from agentrl.train.grpo import run_grpo
    from agentrl.train.sample import run_sample, summary_line
    from agentrl.train.sft import run_sft

    res: dict = {}
    sample_dir = runs / "sample" / f"learning_{env}"
    filtered = GRPO_RUN[env]["filtered"]
    sampled = filtered or bool({"dpo", "rft"} & set(methods))  # the filter's items, or DPO's pairs / RFT's successes
    layers: dict = {"grpo": grpo_layer(preset, env, sizes, sft_adapter, quick)}
    if sampled:
        key, minimum = sizes["success"] or (registry.get(env).success, 1.0)
        layers["sample"] = {"name": f"learning_{env}", "k": sizes["k"], "items": sizes["sample_items"],
                            "success_key": key, "success_min": minimum}
    if "dpo" in methods:
        layers["dpo"] = {"name": f"learning_dpo_{env}", "data": str(sample_dir), "adapter": sft_adapter,
                         "max_steps": sizes["dpo_steps"]}
    p = preset.with_layer(layers, f"benchmarks/learning.py ({env})")
    gate, grpo_settings = p.heldout, p.grpo()
    if sampled:
        cfg = p.sample()
        sample = timed(f"sample {env}", run_sample, cfg, grpo_settings, gate, p.data, runs=runs, source=p.describe())
        print(summary_line(sample, cfg.k), flush=True)
        res["sample"] = {"counts": sample["counts"], "kept": sample["kept"]}
        sample_dir = sample["out"]

    def attempt(method, fn):
        try:
            return fn()
        except DataError as exc:  # no kept item / pair / success: reported as measured, the others go on
            print(f"[learning] {env} {method}: not run ({exc})", flush=True)
            res[method] = {"adapter": None, "why_not": str(exc)}
        except Exception as exc:  # an hour's other results are kept; the failure is in the table and the log
            import traceback

            traceback.print_exc()
            print(f"[learning] {env} {method}: FAILED ({type(exc).__name__}: {exc})", flush=True)
            res[method] = {"adapter": None, "why_not": f"failed: {type(exc).__name__}: {exc}"}
        return None

    def grpo():
        if filtered:  # the items the difficulty filter kept
            settings = dataclasses.replace(grpo_settings, items=str(sample_dir))
        else:
            settings = grpo_settings
        val = registry.split_rows(registry.get(env), "validation", settings.env_settings, p.data)
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
        q = p.with_layer({"sft": {"name": f"learning_rft_{env}", "data": str(sample_dir / "successes"),
                                  "adapter": sft_adapter, "max_steps": sizes["rft_steps"], "check_questions": 0}},
                         f"benchmarks/learning.py (RFT {env})")
        r = run_sft(q.sft(), q.heldout, None, q.data, runs=runs, overwrite=True, source=q.describe())
        res["rft"] = {"adapter": str(r.out / "adapter"), "loss": r.metrics["loss"],
                      "rows": r.metrics["counts"].get("rows")}

    for method, fn in (("grpo", grpo), ("dpo", dpo), ("rft", rft)):
        if method in methods:
            timed(f"{method} {env}", attempt, method, fn)
    return res


def run_env(preset: Preset, env: str, sizes: dict, methods: list[str], held: list[dict], out: Path, timed,
            quick: bool, table: dict, per_item: dict) -> tuple[dict, dict]:
    """Run one environment end to end (demonstrations, base, SFT, the methods, their evaluations) into ``table`` and
    ``per_item``; return the SFT phase's result and the methods' results."""
    from agentrl.envs import registry

    runs, key = out / "runs", OUTCOME.get(env, registry.get(env).success)
    envs_sizes = dataclasses.asdict(preset.demo_envs())
    batch = envs_sizes["textgame_batch"] if env == "textgame" else None

    def eval_model(label: str, adapter: str | None) -> dict:
        name = f"{env}_{label}"
        table[env][label] = evaluate(preset, env, held, adapter, name, out, batch)
        per_item[env][label] = outcomes(out, name, key)
        print(f"[learning] {env} {label}: {table[env][label]}", flush=True)
        return {}

    def demos() -> dict:
        if env in ("search", "sql"):
            m = oracle(preset, runs, f"learning_{env}_oracle", env=env, split="train", qa=None, offset=0,
                       limit=sizes["demos"][env])
            data, report = curate_export(preset, runs, [f"learning_{env}_oracle"], name=f"learning_sft_{env}")
        else:
            train = preset.heldout.drop(split(preset, env, "train"), f"{env} training items")
            if env == "math":
                train = train[:12 if quick else envs_sizes["math_train_problems"]]
            m = oracle(preset, runs, f"learning_{env}_oracle", train, env=env, split="train", qa=None, offset=0,
                       limit=None)
            data, report = curate_export(preset, runs, [f"learning_{env}_oracle"], name=f"learning_sft_{env}",
                                         balance_by=[])  # tool-call counts are the task's, not a skew
        return {"data": str(data), "oracle": m["overall"].get(key), "written": report["written"]}

    demo = timed(f"oracle demos + curation {env}", demos)
    timed(f"eval base {env}", eval_model, "base", None)
    if env in ("search", "sql"):  # one epoch of the curated demonstrations
        changes = {"max_steps": sizes["sft_steps"] or math.ceil(demo["written"]["train"]
                                                                 / preset.sft().per_device_train_batch_size)}
    else:
        changes = {"max_steps": sizes["sft_steps"] or envs_sizes[f"{env}_sft_steps"],
                   "max_length": envs_sizes["sft_max_length"]}
    sft = timed(f"sft {env}", run_sft_phase, preset, runs, quick, demo["data"], name=f"learning_sft_{env}",
                **changes)
    timed(f"eval sft {env}", eval_model, "sft", sft["adapter"])
    if not methods:
        return sft, {}
    res = run_methods(preset, env, sizes, methods, sft["adapter"], runs, timed, quick)
    for m in methods:
        adapter = (res.get(m) or {}).get("adapter")
        if adapter is None:
            table[env][m] = {"why_not": (res.get(m) or {}).get("why_not", "not run")}
        else:
            timed(f"eval {m} {env}", eval_model, m, adapter)
    return sft, res


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Return the command line, checked: unknown environments or methods, methods asked for where they are not
    built, and a missing ``--sql-heldout`` file exit 2 before anything loads."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    # the default: where a 135M model shows learning on CPU; search stays available, near its floor (held-out em 0.02
    # after SFT in the 2026-11-29 run: docs/results.md)
    p.add_argument("--envs", default="sql,textgame", help=f"comma-separated, of: {', '.join(ENVS)} (default: sql,"
                                                           "textgame)")
    p.add_argument("--methods", help=f"comma-separated, of: {', '.join(METHODS)}, or none (default: each where it is "
                                     "built: " + "; ".join(f"{m} on {', '.join(e)}" for m, e in METHOD_ENVS.items())
                                     + ")")
    p.add_argument("--sql-heldout", help="a DB Bench-layout JSONL file held out for SQL (default: AgentBench's DB "
                                         "Bench dev); every task of it is scored, none is trained on")
    p.add_argument("--math-train", help="GSM8K-layout file of math demonstrations (default [demo_envs].math_train)")
    p.add_argument("--quick", action="store_true", help="toy sizes, the same code path end to end")
    p.add_argument("--out", help="a directory, relative to the current one (default: the repository's runs/learning, "
                                 "runs/learning_quick with --quick)")
    p.add_argument("--report", action="store_true", help="print and rewrite the table of a finished run, train nothing")
    args = p.parse_args(argv)
    args.envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in args.envs if e not in ENVS]
    if unknown or not args.envs:
        p.error(f"--envs: unknown environment(s) {unknown} (choose from {', '.join(ENVS)})")
    if args.methods is None:
        args.methods = list(METHODS)
    else:
        args.methods = [m.strip() for m in args.methods.split(",") if m.strip() and m.strip() != "none"]
        bad = [m for m in args.methods if m not in METHODS]
        if bad:
            p.error(f"--methods: unknown method(s) {bad} (choose from {', '.join(METHODS)}, none)")
        for m in args.methods:
            elsewhere = [e for e in args.envs if e not in METHOD_ENVS[m]]
            if elsewhere:
                p.error(f"--methods: {m} is built for {', '.join(METHOD_ENVS[m])} only, not {', '.join(elsewhere)}; "
                        "run those with --methods none (or without --methods: each method where it is built)")
    for flag, path in (("--sql-heldout", args.sql_heldout), ("--math-train", args.math_train)):
        if path and not Path(path).is_file():
            p.error(f"{flag}: {path} is not a file")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print and write its table; return 0 (2 on bad input, before any model loads)."""
    args = parse(argv)
    out = Path(args.out).resolve() if args.out else ROOT / "runs" / ("learning_quick" if args.quick else "learning")
    sql_heldout = str(Path(args.sql_heldout).resolve()) if args.sql_heldout else None
    math_train = str(Path(args.math_train).resolve()) if args.math_train else None
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from learning_report import compare, publish, report, targets

    if args.report:
        return report(out)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")
    from agentrl.app.presets import load
    from agentrl.core.io import DataError, write_json
    from agentrl.envs import registry
    from agentrl.train.smol import ensure_model

    sizes = QUICK if args.quick else FULL
    try:  # the preset checked whole and every held-out set read before an hour of training: exit 2 on bad input
        preset = load(args.config)
        if sql_heldout:  # the file held out everywhere the preset's gate looks: evaluation and GRPO's SQL tables
            preset = preset.with_layer({"eval": {"sql": {"qa": sql_heldout}}, "grpo": {"sql": {"qa": sql_heldout}}},
                                       "benchmarks/learning.py --sql-heldout")
        envs_sizes = dataclasses.asdict(preset.demo_envs())
        if math_train:
            envs_sizes["math_train"] = math_train
        preset = env_preset(preset, envs_sizes, args.quick, args.envs)
        n_sql = sizes["heldout"]["sql"] or preset.demo().sql_heldout_tasks
        held = {env: heldout_rows(preset, env, n_sql if env == "sql" else sizes["heldout"].get(env))
                for env in args.envs}
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for env, rows in held.items():
        if not rows:
            print(f"error: {env}: no held-out item", file=sys.stderr)
            return 2
    start, load_avg = time.perf_counter(), round(os.getloadavg()[0], 1)  # other work on the machine, before ours
    timed = Phases()
    timed("prepare model", lambda: {"model": ensure_model(preset.sft().model.name)})
    if "search" in args.envs:
        from agentrl.data.pipeline import corpus_and_index

        timed.env = "search"
        timed("corpus + index search", lambda: {"index": str(corpus_and_index(
            preset.settings("corpus"), preset.settings("index"), progress=False).index_dir)})
    table: dict = {env: {} for env in args.envs}
    per_item: dict = {env: {} for env in args.envs}
    sft, methods = {}, {}
    for env in args.envs:
        timed.env = env
        chosen = [m for m in args.methods if env in METHOD_ENVS[m]]
        if args.methods and not chosen:
            print(f"[learning] {env}: base -> SFT only (no method of {', '.join(args.methods)} is built for it)")
        sft[env], methods[env] = run_env(preset, env, sizes, chosen, held[env], out, timed, args.quick, table,
                                         per_item)
    compare(table, per_item)
    cmd = " ".join(["uv run python benchmarks/learning.py", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": cmd, "config": args.config, "sizes": sizes, "load": load_avg,
              "grpo_run": {env: GRPO_RUN[env] for env in args.envs if env in GRPO_RUN},
              "heldout": {env: [str(r["id"]) for r in rows] for env, rows in held.items()},
              "sql_heldout": split_source(preset, "sql") if "sql" in args.envs else None,
              "success_keys": {env: OUTCOME.get(env, registry.get(env).success) for env in args.envs},
              "table": table, "per_item": per_item, "sft": sft, "methods": methods, "phases": dict(timed),
              "total_minutes": round((time.perf_counter() - start) / 60, 1)}
    result["targets"] = targets(result)
    write_json(out / "learning.json", result)
    publish(out, result)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
