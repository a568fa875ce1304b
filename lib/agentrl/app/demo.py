"""``agentrl demo``: every phase in order on the bundled data, on CPU, then one summary table.

Each step reuses what an earlier run already produced (delete ``runs/`` or pass ``--rebuild`` to start
over), so a rerun is quick and a killed run picks up where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.app.presets import Preset
from agentrl.core.io import read_json
from agentrl.core.progress import quiet_library_output
from agentrl.data.curate import curate
from agentrl.data.export import FORMATS, export
from agentrl.data.pipeline import corpus_and_index, eval_qa_path
from agentrl.data.stats import analyze
from agentrl.envs import registry
from agentrl.retrieval.evaluate import run_retrieval_eval
from agentrl.rollout.evaluate import run_eval, variant
from agentrl.train import grpo as grpo_phase
from agentrl.train import sft as sft_phase
from agentrl.train.tiny import ensure_tiny_model


@dataclass
class StepResult:
    """One row of the demo summary."""

    phase: str
    artifacts: str
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0


def run_demo(preset: Preset, *, rebuild: bool = False, progress: bool = True) -> list[StepResult]:
    """Run the phases of ``preset`` (agentrl.app.presets.load: its settings are built and checked, TRL's config
    of each training phase too, before the first phase runs) in order; return one StepResult per phase."""
    quiet_library_output()  # one line per phase (training phases: their progress line), no library bars or logs
    sft_phase.preflight(preset.sft())
    grpo_phase.preflight(preset.grpo())
    results: list[StepResult] = []

    def corpus() -> StepResult:
        run = corpus_and_index(preset.settings("corpus"), preset.settings("index"), rebuild=rebuild,
                               progress=progress)
        report = run_retrieval_eval(run.index_dir, eval_qa_path(preset.data))
        hybrid = report["methods"]["hybrid"]
        return StepResult(
            "00 corpus", str(run.corpus_dir),
            {"passages": run_passages(run.index_dir), "recall@5 hybrid": hybrid["recall@5"],
             "recall@5 bm25": report["methods"]["bm25"]["recall@5"],
             "recall@5 dense": report["methods"]["dense"]["recall@5"],
             "recall@5 reachable": hybrid["recall@5_reachable"]})

    phases = [corpus, lambda: demo_eval(preset, rebuild)]
    for env in registry.names(evaluable=True):
        if registry.get(env).demo_items and env != registry.DEFAULT:  # the default env's run is phases 00-04
            phases.append(lambda env=env: demo_env(preset, env, rebuild))
    phases += [lambda: demo_data(preset), lambda: demo_sft(preset, rebuild), lambda: demo_grpo(preset, rebuild)]
    for phase in phases:
        t = time.perf_counter()
        result = phase()
        result.seconds = time.perf_counter() - t
        results.append(result)
        print(phase_line(result), flush=True)
    return results


def phase_line(r: StepResult) -> str:
    """Return a phase's line: name, time and its key figures."""
    figures = " · ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.figures.items())
    return f"[{r.phase}] {r.seconds:.0f} s · {figures}"  # bracketed: the summary's own lines start with the phase


def demo_grpo(preset: Preset, rebuild: bool) -> StepResult:
    """Phase 04: GRPO from the SFT adapter with the search tool in the rollouts."""
    cfg = preset.grpo()
    out = Path("runs") / "grpo" / cfg.name
    if rebuild or not (out / "metrics.json").exists() or not (out / "adapter" / "adapter_config.json").exists():
        metrics = grpo_phase.run_grpo(cfg, preset.heldout, preset.data, eval_run=preset.eval().run,
                                      source=preset.describe()).metrics
    else:
        metrics = read_json(out / "metrics.json")
    hist = metrics["history"]
    q = max(1, len(hist) // 4)
    first, last = (sum(h["reward"] for h in part) / len(part) for part in (hist[:q], hist[-q:]))
    evals = metrics.get("evals") or [{}]
    return StepResult("04 grpo", str(out), {
        "reward first→last quarter": f"{first:.3f}→{last:.3f}", "steps": metrics["steps"],
        "tool calls/rollout (last step)": round(hist[-1].get("tools/call_frequency", 0.0), 2),
        # what the held-out questions say, whether it rose or not (the tiny random model answers none of them)
        "held-out f1 first→last eval": f"{evals[0].get('f1', 0.0):.3f}→{evals[-1].get('f1', 0.0):.3f}",
        "held-out well-formed episodes first→last": f"{evals[0].get('episodes_with_wellformed_call', 0.0):.2f}→"
                                                    f"{evals[-1].get('episodes_with_wellformed_call', 0.0):.2f}"})


def demo_sft(preset: Preset, rebuild: bool) -> StepResult:
    """Phase 03: LoRA SFT of the tiny model on the oracle demonstrations, checked on held-out questions."""
    cfg = preset.sft()
    out = Path("runs") / "sft" / cfg.name
    if rebuild or not (out / "metrics.json").exists() or not (out / "adapter" / "adapter_config.json").exists():
        metrics = sft_phase.run_sft(cfg, preset.heldout, preset.eval(), preset.data, source=preset.describe()).metrics
    else:
        metrics = read_json(out / "metrics.json")
    loss, check = metrics["loss"], metrics.get("check") or {}
    figures = {"loss first→last": f"{loss[0]['loss']:.3f}→{loss[-1]['loss']:.3f}"}
    if check:  # empty when no held-out question was left
        for key, label in (("episodes_with_call", "tool-call episodes"),
                           ("episodes_with_wellformed_call", "well-formed tool-call episodes"), ("f1", "held-out f1")):
            figures[f"{label} base→sft"] = f"{check['base'][key]:.2f}→{check['sft'][key]:.2f}"
    return StepResult("03 sft", str(out), {**figures, "steps": metrics["steps"], "backend": metrics["backend"]})


def demo_env(preset: Preset, env: str, rebuild: bool) -> StepResult:
    """Phase 01 on a further environment (SQL, text game, GSM8K math, HumanEval code, ...): the oracle on its
    ``demo_items`` evaluation items (``[demo] <env>_tasks`` in the preset), spread over its evaluation rows (DB
    Bench's SELECT and INSERT/UPDATE tasks both)."""
    spec = registry.get(env)
    n = getattr(preset.demo(), f"{env}_tasks", None) or spec.demo_items
    cfg = variant(preset.eval(), name=f"{env}_oracle", env=env, policy="oracle", split=None, qa=None, offset=0,
                  limit=None)
    everything = registry.split_rows(spec, spec.eval_split, cfg.env_settings, preset.data)
    rows = everything[::max(1, len(everything) // n)][:n]
    metrics = run_eval(cfg, preset.data, rows=rows, resume=not rebuild, overwrite=rebuild)
    overall = metrics["overall"]
    return StepResult(f"01 eval {env}", f"runs/eval/{cfg.name}", {
        "oracle items": metrics["n"], "oracle success": overall[spec.success],
        **{k: overall.get(k) for k in spec.metrics}})


def demo_data(preset: Preset) -> StepResult:
    """Phase 02: statistics of the phase-01 runs, curation of the oracle demonstrations (held-out items dropped),
    export."""
    cfg = preset.curate()
    out = Path("runs") / "data" / cfg.name
    stats = analyze(["runs/eval/oracle", "runs/eval/tiny_base"], out / "analysis")
    report = curate(["runs/eval/oracle"], cfg, out, preset.heldout)
    export(out, FORMATS, preset.heldout)
    return StepResult("02 data", str(out), {
        "trajectories": stats["total"], "successes (F1>=0.8)": stats["success_f1"],
        "train": report["written"]["train"], "validation": report["written"]["validation"],
        "formats": "+".join(FORMATS)})


def demo_eval(preset: Preset, rebuild: bool) -> StepResult:
    """Phase 01: oracle demonstrations on the training questions, the untrained tiny model on held-out ones."""
    cfg = preset.eval()
    model = ensure_tiny_model(cfg.local.model)
    oracle = run_eval(variant(cfg, name="oracle", policy="oracle", split="train"), preset.data,
                      resume=not rebuild, overwrite=rebuild)
    base = run_eval(variant(cfg, name="tiny_base", policy="local", model_path=str(model), split="heldout"),
                    preset.data, resume=not rebuild, overwrite=rebuild)
    return StepResult("01 eval", "runs/eval/oracle, runs/eval/tiny_base", {
        "oracle trajectories": oracle["n"], "oracle f1 (gold replay)": oracle["overall"]["f1"],
        "tiny base f1": base["overall"]["f1"],
        "tiny base well-formed tool-call episodes": base["tools"]["episodes_with_wellformed_call"]})


def run_passages(index_dir) -> int:
    """Return the passage count recorded in an index manifest."""
    return int(read_json(index_dir / "index.json")["n_passages"])


def print_summary(results: list[StepResult]) -> None:
    """Print the summary: per phase a line with its artifacts and time, then its key figures on one line."""
    width = max(len(r.phase) for r in results)
    print(f"agentrl demo: {len(results)} steps in {sum(r.seconds for r in results):.0f} s")
    for r in results:
        figures = " · ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.figures.items())
        print(f"{r.phase:<{width}}  {r.artifacts}  ({r.seconds:.0f} s)\n{'':<{width}}  {figures}")
