import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    import marimo as mo
    import polars as pl

    from agentrl.app import compare, hparams
    from agentrl.app import notebook as nb
    from agentrl.app.viewer import chat_markdown
    from agentrl.envs.base import tool_methods
    from agentrl.train import grpo
    from agentrl.train.gpu_plan import adapter_rank
    from agentrl.train.grpo_report import print_grpo_summary, reward_chart

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 04 · Multi-turn GRPO with the tools in the rollouts

    Reinforces the SFT adapter with GRPO: every rollout runs the real environment (the same env class the
    evaluation uses: search, SQL, text game, math, code or a mixture, through TRL's `environment_factory`), tool
    results are masked out of the loss, rewards are plain functions with weights from the preset (each env's
    own by default: answer F1, SQL execution, the game's score, math-verify, pass@1, task success), and the
    policy is evaluated with the agent loop on held-out items along the way.

    Headless: `uv run python notebooks/04_grpo.py -- --config demo [--env textgame]` (or `agentrl grpo`). The
    preset is the one every notebook picks (the GPU preset for the card, else `demo`). On a fresh runtime the index
    is built first, and for a CPU preset the SFT adapter too; a GPU preset's adapter comes from notebook 03 (this
    notebook says so and stops). Writes `runs/grpo/<name>/` (`adapter/`, `metrics.json`, `eval/`, `manifest.json`).
    """)
    return


@app.cell
def _():
    args = nb.cli_args("04_grpo")
    preset, which = nb.choose_preset(args)
    # --env search|sql|textgame|math|code|mixed preselects the task family (mixed: the preset's mixture)
    env_pick = nb.env_dropdown(args, nb.env_choices(evaluable=None), default=preset.grpo().env)
    model_pick = nb.model_dropdown(args)
    mo.vstack([mo.md(which), mo.hstack([env_pick, model_pick])])
    return args, env_pick, model_pick, preset, which


@app.cell
def _(env_pick, preset):
    prepare_button = mo.ui.run_button(label="Build the missing inputs")
    _ready = nb.inputs_ready(preset, "grpo", env_pick.value)
    prepare_button if nb.interactive() and not _ready else mo.md("")
    return (prepare_button,)


@app.cell
def _(env_pick, prepare_button, preset, which):
    # a fresh runtime builds the index (and a CPU preset's SFT adapter: minutes) only when asked
    mo.stop(nb.interactive() and not (prepare_button.value or nb.inputs_ready(preset, "grpo", env_pick.value)),
            mo.md("This runtime lacks the index or the SFT adapter GRPO starts from: press **Build the missing "
                  "inputs** (a CPU preset trains its SFT adapter here, minutes)."))
    inputs = nb.phase_inputs(preset, "grpo", env=env_pick.value)  # a fresh runtime: built here
    print(which.replace("**", ""), inputs)
    if inputs.missing:
        nb.stop(inputs.missing)
    return (inputs,)


@app.cell
def _(args, env_pick, model_pick, preset):
    # the form's defaults: the preset with --max_steps / --name, the environment and the model picked above (another
    # environment than the preset's trains as <name>_<env>, with its [grpo.<env>] table: the preset names it)
    _model = nb.prepared_model(model_pick.value)
    cli = {**{k: nb.arg(args, k, None) for k in ("max_steps", "name") if k in args}, "env": env_pick.value,
           **({"model": {"name": _model}} if _model else {})}
    picked = nb.with_flags(preset, {"grpo": cli}, "the notebook's command line and pickers")
    defaults = picked.grpo()
    hp = hparams.form("grpo", defaults)
    mo.vstack([mo.md("### Hyperparameters\nDefaults from the preset's `[grpo]` table; what you change here is "
                     "applied to it before validation and recorded in the run's `manifest.json`."), hp])
    return defaults, hp, picked


@app.cell
def _(defaults, hp, inputs, model_pick, picked, which):
    # the form's changes are the last layer of the preset's merge: the run's settings, built once
    _changes = hparams.overrides(hp.value, defaults)
    _adapter = nb.adapter_for(defaults.adapter, nb.prepared_model(model_pick.value))
    if _adapter != defaults.adapter:  # another base model than the adapter's: a fresh LoRA
        _changes["adapter"] = ""
    run_preset = picked.with_layer({"grpo": _changes}, "the notebook's form") if _changes else picked
    settings = run_preset.grpo()
    task = grpo.build_task(settings, run_preset.data)
    train_rows = grpo.train_rows(settings, run_preset.heldout, run_preset.data)
    env = task.make_env()
    mo.md(f"""
    ## 1 · Environment
    {which} {inputs}

    `{settings.env}`: `{type(env).__name__}` · tools: {", ".join(f"`{t}`" for t in tool_methods(env))} ·
    {len(train_rows)} training items · start from `{settings.adapter or settings.model.name}`
    {f"· changed from the preset: `{_changes}`" if _changes else ""}
    """)
    return run_preset, settings, task, train_rows


@app.cell
def _(settings, task, train_rows):
    # the configured rewards on three episodes of a training item, played on the real env: the oracle's, its
    # answer without any tool call, a broken tool call
    funcs = grpo.reward_functions(settings)[0]
    table = pl.DataFrame(nb.reward_table(funcs, nb.reward_samples(task, train_rows[0]), list(settings.rewards)))
    mo.vstack([mo.md(f"## 2 · Rewards on sample completions\nweights: `{settings.rewards}`"), table])
    return


@app.cell
def _():
    train_button = mo.ui.run_button(label="Train with GRPO")
    mo.vstack([mo.md("## 3 · Train"), train_button])
    return (train_button,)


@app.cell
def _(args, run_preset, settings, train_button):
    mo.stop(nb.interactive() and not train_button.value,
            mo.md(f"Press **Train with GRPO** ({settings.max_steps} steps of {settings.per_device_train_batch_size} "
                  "rollouts)."))
    result = grpo.run_grpo(settings, run_preset.heldout, run_preset.data, eval_run=run_preset.eval().run,
                           resume=nb.arg(args, "resume", False), overwrite=nb.arg(args, "overwrite", False),
                           source=run_preset.describe())
    print_grpo_summary(result.metrics, result.out)
    return (result,)


@app.cell
def _(result):
    history = pl.DataFrame(result.metrics["history"])
    mo.vstack([mo.md("## 4 · Curves"), reward_chart(result.metrics),
               history.select([c for c in history.columns if c in ("step", "reward", "tools/call_frequency",
                                                                  "frac_reward_zero_std", "completions/mean_length")
                               or c.endswith(("/reward", "/success"))])])  # a mixture's families
    return


@app.cell
def _(result):
    evals = pl.DataFrame(result.metrics.get("evals") or [])
    last = result.out / "eval" / f"step_{result.metrics['steps']}" / "trajectories.jsonl"
    from agentrl.core.io import read_jsonl

    example = read_jsonl(last)[0] if last.exists() else None
    mo.vstack([mo.md("## 5 · Evaluation of the current policy on held-out questions"), evals,
               mo.md(chat_markdown(example, 500) if example else "")])
    return


@app.cell
def _(settings):
    # any runs with trajectories (on disk: no training needed); by default the first and the last held-out
    # evaluation of this run's name
    _steps = [r for r in compare.available_runs() if r.startswith(f"runs/grpo/{settings.name}/eval/")]
    picked_runs = mo.ui.multiselect(compare.available_runs(), value=[_steps[0], _steps[-1]] if _steps else [],
                                    label="runs to compare (the first is the baseline)", full_width=True)
    only = mo.ui.dropdown(["all", *compare.STATUSES], value="all", label="items")
    mo.vstack([mo.md("## 6 · Compare runs item by item (also `agentrl compare RUN RUN --html page.html`)"),
               picked_runs, only])
    return only, picked_runs


@app.cell
def _(only, picked_runs):
    mo.stop(len(picked_runs.value) < 2, mo.md("Pick at least two runs."))
    cmp = compare.compare(picked_runs.value)
    mo.vstack([mo.md(f"**{cmp.metric}** on {len(cmp.items)} shared items · "
                     + " · ".join(f"{k} {v}" for k, v in cmp.counts().items()) + " (last run against the first)"),
               compare.aggregate_frame(cmp),
               mo.ui.table(compare.frame(cmp, None if only.value == "all" else only.value), page_size=10)])
    return


@app.cell
def _(result, settings):
    _rank = adapter_rank(str(result.out / "adapter")) or settings.model.lora.rank
    mo.md(f"""
    ## 7 · Save
    The adapter is in `{result.out / "adapter"}` (LoRA r {_rank}). Serve it with
    `{nb.serve_command(settings.model.name, result.out / "adapter", _rank)}`
    (vLLM's default rank limit is 16: `--max-lora-rank` must be at least the adapter's r; the GPU presets train
    r 64), or merge it (`agentrl.train.sft.merge_adapter`) for a standalone 16-bit model.
    """)
    return


if __name__ == "__main__":
    app.run()
