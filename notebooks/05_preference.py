import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    import marimo as mo
    import polars as pl

    from agentrl.app import notebook as nb
    from agentrl.core.io import DataError, read_jsonl
    from agentrl.data import pairs
    from agentrl.train import dpo, sample, sft

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 05 · Learning from the model's own attempts: sampling, DPO and rejection sampling

    The SFT policy tries every training item k times (GRPO's temperature). Items it always or never solves teach
    GRPO nothing (all rewards equal); the **difficulty filter** keeps the others. A success and a failure on the
    same item make a **preference pair** (the shared turns as the prompt, the first differing assistant turn of
    each as chosen / rejected) for **DPO**, which trains the SFT adapter against a frozen copy of itself; the
    successes alone are **rejection-sampling fine-tuning** data (SFT on them, from the SFT adapter). Held-out items
    never enter.

    Headless: `uv run python notebooks/05_preference.py -- --config demo` (or `agentrl sample`,
    `agentrl export --pairs --successes runs/sample/<name>`, `agentrl dpo`, `agentrl rft`). Writes
    `runs/sample/<name>/`, `runs/dpo/<name>/`, `runs/sft/<rft name>/`.
    """)
    return


@app.cell
def _():
    args = nb.cli_args("05_preference")
    preset, which = nb.choose_preset(args)
    if "max_steps" in args:  # a layer of the preset, checked now: before any attempt is sampled
        preset = nb.with_flags(preset, {t: {"max_steps": args["max_steps"]} for t in ("dpo", "rft") if t in preset},
                               "--max-steps")
    mo.md(which)
    return args, preset, which


@app.cell
def _(preset, which):
    if not preset.get("dpo") or not preset.get("rft"):
        nb.stop(f"Preset {preset.name} has no [dpo] / [rft] table: nothing to train after sampling (demo, cpu_smol, "
                "colab_qwen3_4b and gpu_qwen2_5_7b have them; see configs/demo.toml).")
    settings = preset.sample()
    preset.dpo(), preset.rft()  # every table this notebook trains with is checked before any work
    inputs = nb.phase_inputs(preset, "grpo")  # the SFT adapter (a CPU preset builds it here)
    print(which.replace("**", ""), inputs)
    if inputs.missing:
        nb.stop(inputs.missing)
    sample_button = mo.ui.run_button(label="Sample attempts")
    mo.vstack([mo.md(f"## 1 · Sample\n{settings.k} attempts per training item"
                     f" (first {settings.items or 'all'}); success: `{settings.success_key or 'env default'}` "
                     f">= {settings.success_min}"), sample_button])
    return sample_button, settings


@app.cell
def _(preset, sample_button, settings):
    mo.stop(nb.interactive() and not sample_button.value, mo.md("Press **Sample attempts**."))
    sampled = sample.run_sample(settings, preset.grpo(), preset.heldout, preset.data, source=preset.describe())
    print(sample.summary_line(sampled, settings.k))
    outcomes = pl.read_ndjson(sampled["out"] / "outcomes.jsonl").select("id", "successes", "question")
    mo.vstack([mo.md(sample.summary_line(sampled, settings.k)), outcomes])
    return (sampled,)


@app.cell
def _(preset, sampled):
    # pairs and successes are exported apart: a run may have pairs (the model failed where the oracle, or another
    # attempt, succeeded) and no success of the model's own, as the tiny random model's
    exported = {}
    for _what, _export in (("pairs", pairs.export_pairs), ("successes", pairs.export_successes)):
        try:
            exported[_what] = _export(sampled["out"], preset.heldout)
        except DataError as _exc:
            print(f"no {_what}: {_exc}")
    pair_counts, success_counts = exported.get("pairs"), exported.get("successes")
    if not exported:
        nb.stop("Nothing to learn from: no preference pair and no success (sample more attempts or items).")
    print(f"pairs {pair_counts}, successes {success_counts}")
    _shown = [mo.md(f"## 2 · Pairs and successes\npairs `{pair_counts}` · successes `{success_counts}`")]
    if pair_counts:
        _first = read_jsonl(sampled["out"] / "pairs" / "train.jsonl")[0]
        _shown.append(mo.md(f"**chosen**: `{_first['chosen'][0]}`\n\n**rejected**: `{_first['rejected'][0]}`"))
    mo.vstack(_shown)
    return pair_counts, success_counts


@app.cell
def _(pair_counts, success_counts):
    dpo_button = mo.ui.run_button(label="Train DPO", disabled=not pair_counts)
    rft_button = mo.ui.run_button(label="Train rejection-sampling SFT", disabled=not success_counts)
    mo.vstack([mo.md("## 3 · Train"), mo.hstack([dpo_button, rft_button])])
    return dpo_button, rft_button


@app.cell
def _(dpo_button, pair_counts, preset):
    mo.stop(nb.interactive() and pair_counts and not dpo_button.value, mo.md("Press **Train DPO**."))
    dpo_metrics = None
    if pair_counts:  # else: nothing for DPO (said above); the other method may still train
        dpo_metrics = dpo.run_dpo(preset.dpo(), preset.heldout, source=preset.describe())
        dpo.print_dpo_summary(dpo_metrics)
    return (dpo_metrics,)


@app.cell
def _(preset, rft_button, success_counts):
    mo.stop(nb.interactive() and success_counts and not rft_button.value,
            mo.md("Press **Train rejection-sampling SFT**."))
    rft_result = None
    if success_counts:
        rft_result = sft.run_sft(preset.rft(), preset.gate(preset.rft().data), None, preset.data,
                                 source=preset.describe())
        sft.print_sft_summary(rft_result.metrics, rft_result.out)
    return (rft_result,)


@app.cell
def _(dpo_metrics, rft_result):
    def row(method, steps, losses, out):
        return {"method": method, "steps": steps, "first loss": losses[0] if losses else None,
                "last loss": losses[-1] if losses else None, "adapter": str(out / "adapter")}

    results = pl.DataFrame([
        *([row("DPO", dpo_metrics["steps"], [h["loss"] for h in dpo_metrics["history"]], dpo_metrics["out"])]
          if dpo_metrics else []),
        *([row("rejection-sampling SFT", rft_result.metrics["steps"],
               [x["loss"] for x in rft_result.metrics["loss"]], rft_result.out)] if rft_result else [])])
    print(results)
    mo.vstack([mo.md("## 4 · Results\nEvaluate either adapter on held-out items with `agentrl eval --policy local "
                     "--adapter ...` (benchmarks/learning.py compares them with SFT, with intervals)."), results])
    return


if __name__ == "__main__":
    app.run()
