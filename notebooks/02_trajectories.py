import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    from pathlib import Path

    import marimo as mo
    import polars as pl

    from agentrl.app import notebook as nb
    from agentrl.app.viewer import chat_markdown
    from agentrl.data.export import FORMATS
    from agentrl.data.stats import charts, compute_stats, stats_markdown
    from agentrl.data.trajectories import read_trajectory, trajectory_frame

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 02 · Trajectories: statistics, curation, export

    What gets trained is decided here. Statistics split by outcome (how many tool calls and turns do the
    successes take?), filters and balancing with a report of what each step removed, a train/validation split
    by question, and export to TRL, ms-swift and ShareGPT.

    Headless: `uv run python notebooks/02_trajectories.py -- --config demo --runs runs/eval/oracle`
    (`--env textgame|math|code|sql` picks that environment's oracle run; or `agentrl analyze / curate /
    export`). The preset is the one every notebook picks; without any trajectories on this runtime the oracle's
    demonstrations are built first. Writes `runs/data/<name>/`.
    """)
    return


@app.cell
def _():
    args = nb.cli_args("02_trajectories")
    preset, which = nb.choose_preset(args)
    # --env NAME (a registered environment, or path/to/my_env.py) preselects the environment whose runs are shown
    env_pick = nb.env_dropdown(args)
    mo.vstack([mo.md(which), env_pick])
    return args, env_pick, preset


@app.cell
def _(args, env_pick, preset):
    # search: the preset's own runs (and the demo's untrained model, for the statistics); another env: its oracle
    # run (notebook 01 / agentrl demo). --runs replaces them for the environment it was given with
    _env = env_pick.value
    _given = nb.arg(args, "runs", None) if _env == nb.arg(args, "env", nb.default_env()) else None
    _inputs = nb.phase_inputs(preset, "data", env=_env) if not _given else nb.Inputs()
    if _given:
        _default = str(_given).split(",")
    elif _env == nb.default_env():
        _default = [*nb.existing_runs(preset), "runs/eval/tiny_base"]
    else:
        _default = [f"runs/eval/{_env}_oracle"]
    runs = [r for r in _default if Path(r).exists()]
    print(_inputs)
    if not runs:
        nb.stop(f"No trajectories of {', '.join(_default)}: run notebook 01 first (e.g. `--env {_env} --policy "
                f"oracle`, or `agentrl eval --config {nb.preset_name(preset)} --env {_env} --policy oracle "
                f"--name {_env}_oracle`).")
    df = trajectory_frame(runs)
    stats = compute_stats(df)
    print(f"{stats['total']} trajectories from {runs}: {stats['success_f1']} successes (F1 >= 0.8)")
    mo.md(stats_markdown(stats, f"Statistics of {', '.join(runs)}"))
    return df, runs


@app.cell
def _(df):
    c = charts(df)
    mo.hstack([c["tool_calls_by_outcome"], c["f1_histogram"], c["tokens_by_outcome"]], wrap=True)
    return


@app.cell
def _(df):
    min_f1 = mo.ui.slider(0.0, 1.0, step=0.05, value=0.0, label="min F1")
    finish = mo.ui.multiselect(sorted(df["finish"].unique().to_list()), label="finish")
    mo.hstack([min_f1, finish])
    return finish, min_f1


@app.cell
def _(df, finish, min_f1):
    shown = df.filter(pl.col("f1").fill_null(0) >= min_f1.value)
    if finish.value:
        shown = shown.filter(pl.col("finish").is_in(finish.value))
    table = mo.ui.table(shown.select("id", "type", "f1", "em", "finish", "turns", "tool_calls", "total_tokens",
                                     "question", "prediction", "source", "row"), page_size=10, selection="single")
    table
    return shown, table


@app.cell
def _(shown, table):
    chosen = table.value if table.value.height else shown
    picked = chosen.row(0, named=True) if chosen.height else None
    mo.md(chat_markdown(read_trajectory(picked["source"], picked["row"])) if picked else "No trajectory selected.")
    return


@app.cell
def _():
    curate_button = mo.ui.run_button(label="Curate + export")
    curate_button
    return (curate_button,)


@app.cell
def _(curate_button, env_pick, preset, runs):
    cfg = preset.curate()
    # the search pipeline's data keeps the preset's name (03 trains on it); another environment's gets its own
    out = Path("runs") / "data" / (cfg.name if env_pick.value == nb.default_env() else f"{cfg.name}_{env_pick.value}")
    mo.stop(nb.interactive() and not curate_button.value,
            mo.md(f"Press **Curate + export** to write `{out}` with the preset's `[data]` settings."))
    _done = nb.curate_runs(preset, runs, out)
    report, counts = _done["report"], _done["counts"]
    print(f"curated {out}: {report['written']}; exported {list(FORMATS)}: {counts}")
    mo.vstack([mo.md(f"Wrote `{out}`: {report['written']}, exported as {', '.join(FORMATS)}"),
               pl.DataFrame(report["steps"])])
    return


if __name__ == "__main__":
    app.run()
