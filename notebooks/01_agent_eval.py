import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    from dataclasses import replace
    from pathlib import Path

    import marimo as mo

    from agentrl.app import notebook as nb
    from agentrl.app.viewer import chat_markdown, metric_by_type_chart, metric_notes, trajectories_frame
    from agentrl.core.io import read_json, read_jsonl
    from agentrl.rollout.evaluate import build_task, load_rows, run_eval

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 01 · Agent evaluation

    Runs an agent over a QA set — an OpenAI-compatible endpoint (vLLM, OpenRouter, Ollama), a local model, or
    the **oracle** that replays gold evidence — with the tools executed for real, and keeps every trajectory.
    The same run is trajectory synthesis: phase 02 curates these files.

    Headless: `uv run python notebooks/01_agent_eval.py -- --config demo --policy oracle`
    or `agentrl eval --config demo --policy endpoint --base-url http://localhost:8000/v1
    --model Qwen/Qwen3-4B-Instruct-2507`. The preset is the one every notebook picks (the GPU preset for the
    card, else `demo`); when its endpoint is not running and no `--policy` was given, the oracle runs instead
    (the demonstrations phase 02 curates), with a note saying how to serve the model.
    Writes `runs/eval/<name>/` (`trajectories.jsonl`, `metrics.json`, `manifest.json`); reruns resume.
    """)
    return


@app.cell
def _():
    args = nb.cli_args("01_agent_eval")
    preset, which = nb.choose_preset(args)
    preset = nb.with_flags(preset, nb.eval_flags(args, preset))  # checked before the form shows them
    defaults = preset.eval()
    env = nb.env_dropdown(args, default=defaults.env)
    policy = mo.ui.dropdown(["oracle", "endpoint", "local"], value=nb.arg(args, "policy", defaults.policy),
                            label="policy")
    base_url = mo.ui.text(value=nb.arg(args, "base_url", ""), label="base URL", placeholder="http://localhost:8000/v1")
    model = mo.ui.text(value=nb.arg(args, "model", ""), label="model", placeholder="Qwen/Qwen3-4B-Instruct-2507")
    local_model = mo.ui.dropdown(nb.MODEL_CHOICES, value="preset's model", label="local model")
    temperature = mo.ui.number(start=0.0, stop=2.0, step=0.1, value=nb.arg(args, "temperature", 0.0),
                               label="temperature")
    # the environment's evaluation budget (its [eval.<env>] max_new_tokens): what every evaluation of it reads
    shown_tokens = nb.eval_tokens(preset, defaults.env)
    max_tokens = mo.ui.number(start=16, stop=32_768, value=nb.arg(args, "max_new_tokens", shown_tokens),
                              label="new tokens a turn")
    extra_body = mo.ui.text(value=nb.arg(args, "extra_body", ""), label="extra_body (JSON)",
                            placeholder='{"chat_template_kwargs": {"enable_thinking": false}}')
    limit = mo.ui.number(start=0, stop=100_000, value=nb.arg(args, "limit", defaults.limit or 0),
                         label="questions (0: every row of the split)")
    name = mo.ui.text(value=nb.arg(args, "name", defaults.name), label="run name")
    run_button = mo.ui.run_button(label="Run evaluation")
    print(which.replace("**", ""))
    mo.vstack([mo.md(which), mo.hstack([env, policy, name, limit]), mo.hstack([base_url, model, local_model]),
               mo.hstack([temperature, max_tokens, extra_body]), run_button,
               mo.md("The API key is read from `OPENAI_API_KEY` or `.env`, never from this form.")])
    return (args, base_url, env, extra_body, limit, local_model, max_tokens, model, name, policy, preset,
            run_button, shown_tokens, temperature)


@app.cell
def _(args, base_url, env, extra_body, limit, local_model, max_tokens, model, name, policy, preset, shown_tokens,
      temperature):
    # the preset's run name with another policy becomes that policy's own (never the oracle's results for "local")
    _name = nb.run_name(preset, env.value, policy.value, name.value)
    # the form is the last layer of the preset's merge: checked like a preset value, recorded in the manifest
    _endpoint = {"temperature": float(temperature.value),
                 **({"base_url": base_url.value} if base_url.value else {}),
                 **({"model": model.value} if model.value else {}),
                 **({"extra_body": nb.json_value(extra_body.value)} if extra_body.value else {})}
    _local = {"model": nb.prepared_model(local_model.value)} if policy.value == "local" and local_model.value else {}
    _budget = {env.value: {"max_new_tokens": int(max_tokens.value)}} if int(max_tokens.value) != shown_tokens else {}
    _form = {"eval": {"env": env.value, "policy": policy.value, "name": _name, "endpoint": _endpoint, **_budget,
                      **({"limit": int(limit.value)} if limit.value else {}), **({"local": _local} if _local else {})}}
    cfg = preset.with_layer(_form, "the notebook's form").eval()
    if cfg.policy == "oracle" and cfg.env == nb.default_env() and not nb.arg(args, "split", None):
        cfg = nb.oracle_config(preset, name=cfg.name, limit=cfg.limit)  # demonstrations: the training questions
    _note = ""
    if cfg.policy == "endpoint" and not nb.endpoint_up(cfg.endpoint.base_url):
        _where = (f"No server answers at `{cfg.endpoint.base_url}`" if cfg.endpoint.base_url
                  else "No base URL: type the endpoint's URL (e.g. `http://localhost:8000/v1`) above")
        _note = (f"{_where}. To evaluate a served model, start it first: "
                 f"`{nb.serve_command(cfg.endpoint.model)}`" + ("" if cfg.endpoint.model else " (type its name above)"))
        # only the preset's own default falls back to the oracle (the demonstrations phase 02 curates); a policy
        # chosen here or with --policy stops with the note
        if "policy" not in args and policy.value == preset.eval().policy:
            _pipeline = cfg.env == nb.default_env()  # the corpus -> SFT pipeline's own oracle run
            cfg = (nb.oracle_config(preset) if _pipeline
                   else replace(cfg, name=f"{cfg.env}_oracle", policy="oracle"))
            _note += f". Meanwhile this runs the **oracle** (gold evidence through the real tools) as `{cfg.name}`."
        else:
            nb.stop(_note + ".")
    print(_note or f"evaluating {cfg.policy} as {cfg.name}")
    mo.md(_note or f"Evaluating **{cfg.policy}** as run `{cfg.name}` (`runs/eval/{cfg.name}/`).")
    return (cfg,)


@app.cell
def _(cfg, preset, run_button):
    out_dir = Path("runs") / "eval" / cfg.name
    mo.stop(nb.interactive() and not ((out_dir / "metrics.json").exists() or run_button.value),
            mo.md("Press **Run evaluation** (results of an earlier run with this name show up here directly)."))
    if run_button.value or not nb.interactive():
        _inputs = nb.phase_inputs(preset, "eval", env=cfg.env)  # a fresh runtime: the corpus index first
        # in chunks, so the table fills in as trajectories arrive (each chunk resumes the run)
        _total = len(load_rows(cfg, preset.data))
        _step = max(2 * cfg.run.concurrency, 50) if nb.interactive() else _total
        _task = build_task(cfg, preset.data)  # the retriever is loaded once, not per chunk
        for _n in range(_step, _total + _step, _step):
            run_eval(replace(cfg, limit=min(_n, _total)), preset.data, resume=True, task=_task)
            if nb.interactive():
                _sofar = read_jsonl(out_dir / "trajectories.jsonl")
                mo.output.replace(mo.vstack([mo.md(f"{len(_sofar)} / {_total} questions done…"),
                                             mo.ui.table(trajectories_frame(_sofar), page_size=5)]))
    records = read_jsonl(out_dir / "trajectories.jsonl")
    overall = read_json(out_dir / "metrics.json")["overall"]
    _shown = " · ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in overall.items())
    print(f"{cfg.name}: {len(records)} trajectories, {_shown}")
    mo.md(f"**{cfg.name}** · {len(records)} trajectories · {_shown}")
    return (records,)


@app.cell
def _():
    metric = mo.ui.dropdown(["acc", "f1", "em"], value="acc", label="metric by question type")
    metric
    return (metric,)


@app.cell
def _(cfg, metric, records):
    _note = metric_notes(cfg.env)
    mo.vstack([mo.ui.table(trajectories_frame(records), page_size=10), metric_by_type_chart(records, metric.value),
               mo.md(_note) if _note else mo.md("")])
    return


@app.cell
def _(records):
    picked = mo.ui.dropdown([r["id"] for r in records], value=records[0]["id"], label="trajectory")
    picked
    return (picked,)


@app.cell
def _(picked, records):
    mo.md(chat_markdown(next(r for r in records if r["id"] == picked.value)))
    return


if __name__ == "__main__":
    app.run()
