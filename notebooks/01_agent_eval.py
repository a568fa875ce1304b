import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    from pathlib import Path

    import marimo as mo

    from agentrl import notebook as nb
    from agentrl.config import load_preset
    from agentrl.evaluate import eval_config, run_eval
    from agentrl.io import read_json, read_jsonl
    from agentrl.viewer import chat_markdown, metric_by_type_chart, trajectories_frame

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
    --model Qwen/Qwen3-4B-Instruct-2507`.
    Writes `runs/eval/<name>/` (`trajectories.jsonl`, `metrics.json`, `manifest.json`); reruns resume.
    """)
    return


@app.cell
def _():
    args = nb.cli_args()
    preset = load_preset(nb.arg(args, "config", "demo"))
    defaults = preset.get("eval", {})
    policy = mo.ui.dropdown(["oracle", "endpoint", "local"],
                            value=nb.arg(args, "policy", defaults.get("policy", "oracle")), label="policy")
    base_url = mo.ui.text(value=nb.arg(args, "base_url", ""), label="base URL", placeholder="http://localhost:8000/v1")
    model = mo.ui.text(value=nb.arg(args, "model", ""), label="model", placeholder="Qwen/Qwen3-4B-Instruct-2507")
    limit = mo.ui.number(start=1, stop=100_000, value=nb.arg(args, "limit", 200), label="questions")
    name = mo.ui.text(value=nb.arg(args, "name", defaults.get("name", "eval")), label="run name")
    run_button = mo.ui.run_button(label="Run evaluation")
    mo.vstack([mo.hstack([policy, name, limit]), mo.hstack([base_url, model]), run_button,
               mo.md("The API key is read from `OPENAI_API_KEY` or `.env`, never from this form.")])
    return base_url, limit, model, name, policy, preset, run_button


@app.cell
def _(base_url, limit, model, name, policy, preset, run_button):
    cfg = eval_config(preset, policy=policy.value, name=name.value, limit=int(limit.value),
                      base_url=base_url.value or None, model=model.value or None)
    out_dir = Path("runs") / "eval" / cfg.name
    mo.stop(nb.interactive() and not ((out_dir / "metrics.json").exists() or run_button.value),
            mo.md("Press **Run evaluation** (results of an earlier run with this name show up here directly)."))
    if run_button.value or not nb.interactive():
        with mo.status.spinner(f"Running {cfg.policy} on {cfg.limit} questions…"):
            run_eval(cfg, preset, resume=True)
    records = read_jsonl(out_dir / "trajectories.jsonl")
    overall = read_json(out_dir / "metrics.json")["overall"]
    print(f"{cfg.name}: {len(records)} trajectories, {overall}")
    mo.md(f"**{cfg.name}** · {len(records)} trajectories · `{overall}`")
    return (records,)


@app.cell
def _(records):
    mo.vstack([mo.ui.table(trajectories_frame(records), page_size=10), metric_by_type_chart(records)])
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
