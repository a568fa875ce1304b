import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    import marimo as mo
    import polars as pl

    from agentrl import notebook as nb
    from agentrl.envs.base import tool_methods
    from agentrl.rewards import answer_f1, format_reward, tool_use
    from agentrl.train import grpo
    from agentrl.viewer import chat_markdown

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 04 · Multi-turn GRPO with the tools in the rollouts

    Reinforces the SFT adapter with GRPO: every rollout runs the real environment (the same `SearchEnv` the
    evaluation uses, through TRL's `environment_factory`), tool results are masked out of the loss, rewards
    are plain functions with weights from the preset, and the policy is evaluated with the agent loop on
    held-out questions along the way.

    Headless: `uv run python notebooks/04_grpo.py -- --config demo` (or `agentrl grpo --config demo`). The preset
    is the one every notebook picks (the GPU preset for the card, else `demo`). On a fresh runtime the index is
    built first, and for a CPU preset the SFT adapter too; a GPU preset's adapter comes from notebook 03 (this
    notebook says so and stops). Writes `runs/grpo/<name>/` (`adapter/`, `metrics.json`, `eval/`, `manifest.json`).
    """)
    return


@app.cell
def _():
    model_pick = nb.model_dropdown(nb.cli_args())
    model_pick
    return (model_pick,)


@app.cell
def _():
    args = nb.cli_args()
    preset, which = nb.choose_preset(args)
    # --env textgame|math|code|sql|mixed (mixed: the preset's [grpo] mixture) picks the task family
    inputs = nb.phase_inputs(preset, "grpo", env=nb.arg(args, "env", "search"))  # a fresh runtime: built here
    print(which.replace("**", ""), inputs)
    if inputs.missing:
        nb.stop(inputs.missing)
    mo.md(f"{which} {inputs}")
    return args, inputs, preset, which


@app.cell
def _(args, inputs, model_pick, preset, which):
    settings = grpo.grpo_config(preset, max_steps=nb.arg(args, "max_steps", None), name=nb.arg(args, "name", None),
                                env=nb.arg(args, "env", None), model_name=nb.prepared_model(model_pick.value))
    settings.adapter = nb.adapter_for(settings.adapter, nb.prepared_model(model_pick.value))
    task = grpo.build_task(settings, preset)
    env = task.make_env()
    mo.md(f"""
    ## 1 · Environment
    {which} {inputs}

    `{settings.env}`: `{type(env).__name__}` · tools: {", ".join(f"`{t}`" for t in tool_methods(env))} ·
    training questions from {settings.train_offset} ({settings.train_questions or "all"}) ·
    start from `{settings.adapter or settings.model.name}`
    """)
    return settings, task


@app.cell
def _(settings):
    gold = [["Tim Burton"]] * 3
    samples = {
        "searched, then answered": [
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "search", "arguments": {"query": "Ed Wood film"}}}]},
            {"role": "tool", "name": "search", "content": "Doc 1 (Title: Ed Wood (film)) ... Tim Burton ..."},
            {"role": "assistant", "content": "<answer>Tim Burton</answer>"}],
        "answered without searching": [{"role": "assistant", "content": "<answer>Steven Spielberg</answer>"}],
        "broken tool call": [{"role": "assistant", "content": '<tool_call>{"name": "search", "argu'}],
    }
    comps = list(samples.values())
    table = pl.DataFrame({"completion": list(samples), "answer_f1": answer_f1(None, comps, golden_answers=gold),
                          "format": format_reward(None, comps), "tool_use": tool_use(None, comps)})
    mo.vstack([mo.md(f"## 2 · Rewards on sample completions\nweights: `{settings.rewards}`"), table])
    return


@app.cell
def _():
    train_button = mo.ui.run_button(label="Train with GRPO")
    mo.vstack([mo.md("## 3 · Train"), train_button])
    return (train_button,)


@app.cell
def _(args, preset, settings, train_button):
    mo.stop(nb.interactive() and not train_button.value,
            mo.md(f"Press **Train with GRPO** ({settings.max_steps} steps of {settings.batch_size} rollouts)."))
    result = grpo.run_grpo(settings, preset, resume=nb.arg(args, "resume", False),
                           overwrite=nb.arg(args, "overwrite", False))
    grpo.print_grpo_summary(result.metrics, result.out)
    return (result,)


@app.cell
def _(result):
    history = pl.DataFrame(result.metrics["history"])
    mo.vstack([mo.md("## 4 · Curves"), grpo.reward_chart(result.metrics),
               history.select([c for c in history.columns if c in ("step", "reward", "tools/call_frequency",
                                                                  "frac_reward_zero_std", "completions/mean_length")])])
    return


@app.cell
def _(result):
    evals = pl.DataFrame(result.metrics.get("evals") or [])
    last = result.out / "eval" / f"step_{result.metrics['steps']}" / "trajectories.jsonl"
    from agentrl.io import read_jsonl

    example = read_jsonl(last)[0] if last.exists() else None
    mo.vstack([mo.md("## 5 · Evaluation of the current policy on held-out questions"), evals,
               mo.md(chat_markdown(example, 500) if example else "")])
    return


@app.cell
def _(result, settings):
    mo.md(f"""
    ## 6 · Save
    The adapter is in `{result.out / "adapter"}`. Serve it with
    `{nb.serve_command(settings.model.name, result.out / "adapter")}`
    (vLLM's default rank limit is 16; the presets train r 64), or merge it
    (`agentrl.train.sft.merge_adapter`) for a standalone 16-bit model.
    """)
    return


if __name__ == "__main__":
    app.run()
