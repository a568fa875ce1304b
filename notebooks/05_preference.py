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
    args = nb.cli_args()
    preset, which = nb.choose_preset(args)
    mo.md(which)
    return args, preset, which


@app.cell
def _(preset, which):
    inputs = nb.phase_inputs(preset, "grpo")  # the SFT adapter (a CPU preset builds it here)
    print(which.replace("**", ""), inputs)
    if inputs.missing:
        nb.stop(inputs.missing)
    if not preset.get("dpo") or not preset.get("rft"):
        nb.stop("This preset has no [dpo] / [rft] table (see configs/demo.toml).")
    settings = preset.sample()
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
    try:
        pair_counts = pairs.export_pairs(sampled["out"], preset.heldout)
        success_counts = pairs.export_successes(sampled["out"], preset.heldout)
    except DataError as exc:
        pair_counts = None
        nb.stop(f"Nothing to learn from: {exc}")
    if pair_counts:
        first = read_jsonl(sampled["out"] / "pairs" / "train.jsonl")[0]
        print(f"pairs {pair_counts}, successes {success_counts}")
        mo.output.replace(mo.vstack([mo.md(f"## 2 · Pairs and successes\npairs `{pair_counts}` · successes "
                         f"`{success_counts['rows']}` rows"),
                   mo.md(f"**chosen**: `{first['chosen'][0]}`\n\n**rejected**: `{first['rejected'][0]}`")]))
    return (pair_counts,)


@app.cell
def _(pair_counts):
    mo.stop(not pair_counts)
    dpo_button = mo.ui.run_button(label="Train DPO")
    rft_button = mo.ui.run_button(label="Train rejection-sampling SFT")
    mo.vstack([mo.md("## 3 · Train"), mo.hstack([dpo_button, rft_button])])
    return dpo_button, rft_button


@app.cell
def _(args, dpo_button, preset):
    mo.stop(nb.interactive() and not dpo_button.value, mo.md("Press **Train DPO**."))
    _steps = nb.arg(args, "max_steps", None)
    _preset = preset.with_layer({"dpo": {"max_steps": _steps}}, "--max_steps") if _steps else preset
    dpo_metrics = dpo.run_dpo(_preset.dpo(), _preset.heldout, source=_preset.describe())
    dpo.print_dpo_summary(dpo_metrics)
    return (dpo_metrics,)


@app.cell
def _(args, preset, rft_button):
    mo.stop(nb.interactive() and not rft_button.value, mo.md("Press **Train rejection-sampling SFT**."))
    _steps = nb.arg(args, "max_steps", None)
    _preset = preset.with_layer({"rft": {"max_steps": _steps}}, "--max_steps") if _steps else preset
    rft_result = sft.run_sft(_preset.rft(), _preset.heldout, None, _preset.data, source=_preset.describe())
    sft.print_sft_summary(rft_result.metrics, rft_result.out)
    return (rft_result,)


@app.cell
def _(dpo_metrics, rft_result):
    def row(method, steps, losses, out):
        return {"method": method, "steps": steps, "first loss": losses[0] if losses else None,
                "last loss": losses[-1] if losses else None, "adapter": str(out / "adapter")}

    results = pl.DataFrame([
        row("DPO", dpo_metrics["steps"], [h["loss"] for h in dpo_metrics["history"]], dpo_metrics["out"]),
        row("rejection-sampling SFT", rft_result.metrics["steps"], [x["loss"] for x in rft_result.metrics["loss"]],
            rft_result.out)])
    print(results)
    mo.vstack([mo.md("## 4 · Results\nEvaluate either adapter on held-out items with `agentrl eval --policy local "
                     "--adapter ...` (benchmarks/learning.py compares them with SFT, with intervals)."), results])
    return


if __name__ == "__main__":
    app.run()
