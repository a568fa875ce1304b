import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    from pathlib import Path

    import altair as alt
    import marimo as mo
    import polars as pl

    from agentrl.app import hparams
    from agentrl.app import notebook as nb
    from agentrl.app.viewer import chat_markdown
    from agentrl.core.io import read_jsonl
    from agentrl.train import sft

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 03 · LoRA SFT on agent trajectories

    Fine-tunes a LoRA adapter on the curated trajectories of phase 02 — loss on assistant tokens only (tool
    calls and answers; prompts and tool results are context) — then runs the agent with the adapter on
    held-out questions next to the base model. Unsloth on a CUDA GPU, transformers + peft elsewhere.

    Headless: `uv run python notebooks/03_sft.py -- --config demo` (or `agentrl sft --config demo`). The preset
    is the one every notebook picks (the GPU preset for the card, else `demo`); on a fresh runtime the SFT data
    is built first (corpus + index, the oracle's demonstrations, curation). `--resume` continues from the last
    checkpoint; `--overwrite` deletes an earlier run's checkpoints instead of moving them aside.
    Writes `runs/sft/<name>/` (`adapter/`, `check/`, `metrics.json`, `manifest.json`).
    """)
    return


@app.cell
def _():
    model_pick = nb.model_dropdown(nb.cli_args("03_sft"))
    model_pick
    return (model_pick,)


@app.cell(hide_code=True)
def _(model_pick):
    import importlib.util

    import torch

    from agentrl.train.models import choose_backend

    args = nb.cli_args("03_sft")
    preset, which = nb.choose_preset(args)
    # --max_steps / --name on the command line and the model picked: a layer under the form's (the preset otherwise)
    model_name = nb.prepared_model(model_pick.value)
    cli = {**{k: nb.arg(args, k, None) for k in ("max_steps", "name") if k in args},
           **({"model": {"name": model_name}} if model_name else {})}
    preset = nb.with_flags(preset, {"sft": cli} if cli else {}, "the notebook's command line")
    defaults = preset.sft()
    backend, reason = choose_backend(defaults.model.backend)
    print(which.replace("**", ""), f"backend {backend} ({reason})")
    mo.md(f"""
    ## 1 · Install
    Locally `uv sync` has everything for the CPU path. On Colab or a GPU box the exported notebook's first cell
    installs the pinned GPU stack and this repository (`scripts/export_to_ipynb.sh`).

    {which} · torch {torch.__version__} · CUDA available: **{torch.cuda.is_available()}** · unsloth installed:
    **{importlib.util.find_spec("unsloth") is not None}** → backend **{backend}** ({reason})
    """)
    return args, defaults, preset


@app.cell
def _(defaults):
    hp = hparams.form("sft", defaults)
    mo.vstack([mo.md("### Hyperparameters\nDefaults from the preset's `[sft]` table; what you change here is applied "
                     "to it before validation and recorded in the run's `manifest.json`."), hp])
    return (hp,)


@app.cell
def _(defaults, hp, preset):
    # the form's changes are the last layer of the preset's merge: checked like any preset value, then built once
    _changes = hparams.overrides(hp.value, defaults)
    run_preset = preset.with_layer({"sft": _changes}, "the notebook's form") if _changes else preset
    settings = run_preset.sft()
    mo.md(f"Changed from the preset: `{_changes}`" if _changes else "")
    return run_preset, settings


@app.cell
def _(settings):
    load_button = mo.ui.run_button(label="Load model + data")
    mo.vstack([mo.md(f"## 2 · Model and data\n`{settings.model.name}` with LoRA r={settings.model.lora.rank}, "
                     f"alpha={settings.model.lora.scale}; data `{settings.data}`"), load_button])
    return (load_button,)


@app.cell
def _(load_button, run_preset, settings):
    mo.stop(nb.interactive() and not load_button.value,
            mo.md("Press **Load model + data** (on a fresh runtime this first builds the corpus, the oracle's "
                  "demonstrations and the curated data)."))
    inputs = nb.phase_inputs(run_preset, "sft")  # a fresh runtime: the earlier phases' outputs, built here
    if inputs.missing:
        nb.stop(inputs.missing)
    loaded = sft.load_model(settings)
    trainable = sum(p.numel() for p in loaded.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in loaded.model.parameters())
    print(inputs, f"model {settings.model.name} on {loaded.backend}: {trainable:,} trainable of {total:,} parameters")
    data = sft.load_data(settings, loaded.tokenizer, run_preset.gate(settings.data))  # held-out items dropped
    print(f"data {data.train_path}: {data.counts}")
    _row = data.train[0]
    mo.vstack([mo.md(f"`{settings.model.name}` on **{loaded.backend}** · {trainable:,} trainable of {total:,} "
                     f"parameters {inputs}"),
               mo.md(f"`{data.train_path}` · {data.counts}"),
               mo.md(chat_markdown({"id": _row["id"], "messages": _row["messages"], "policy": "oracle"}, 400))])
    return data, loaded


@app.cell
def _():
    train_button = mo.ui.run_button(label="Train")
    mo.vstack([mo.md("## 4 · Train"), train_button])
    return (train_button,)


@app.cell
def _(args, data, loaded, settings, train_button):
    out = Path("runs") / "sft" / settings.name
    mo.stop(nb.interactive() and not train_button.value,
            mo.md(f"Press **Train** ({settings.max_steps} steps, lr {settings.learning_rate})."))
    trainer = sft.make_trainer(settings, loaded, data, sft.build_args(settings, data, out, loaded.backend))
    metrics = sft.train(trainer, loaded, data, resume=nb.arg(args, "resume", False),
                        overwrite=nb.arg(args, "overwrite", False))
    sft.save_adapter(trainer.model, loaded.tokenizer, out, settings)
    sft.print_sft_summary(metrics, out)
    _loss = pl.DataFrame(metrics["loss"]) if metrics["loss"] else None
    (alt.Chart(_loss).mark_line(point=True).encode(x="step", y="loss").properties(title="training loss")
     if _loss is not None else mo.md(f"No loss logged: {metrics['steps']} steps, `logging_steps` "
                                     f"{settings.logging_steps}."))
    return metrics, out


@app.cell
def _(data, loaded, metrics, out, run_preset, settings):
    check = (sft.inference_check(loaded.model, loaded.tokenizer, settings, run_preset.eval(), run_preset.data,
                                 out / "check") if settings.check_questions > 0 else {})
    metrics["check"] = check
    sft.write_run(out, settings, metrics, data, run_preset.heldout, run_preset.describe())
    table = pl.DataFrame([{"model": k, **{m: v for m, v in c.items() if m != "finish"}} for k, c in check.items()])
    print(table)
    _traj = read_jsonl(out / "check" / "sft" / "trajectories.jsonl")[0] if check else None
    mo.vstack([mo.md("## 5 · Inference check on held-out questions (base vs adapter)"),
               table if check else mo.md("No held-out question left (all were in the SFT data): check skipped."),
               mo.md(nb.check_note(settings.model.name, check)), mo.md(chat_markdown(_traj, 600) if _traj else "")])
    return


@app.cell
def _(settings):
    merge_button = mo.ui.run_button(label="Merge to 16-bit")
    mo.vstack([mo.md(f"## 6 · Save\nThe adapter is in `runs/sft/{settings.name}/adapter` (LoRA r "
                     f"{settings.model.lora.rank}). Merge it for serving without `--enable-lora --max-lora-rank "
                     f"{max(16, settings.model.lora.rank)}` (see docs/colab.md)."), merge_button])
    return (merge_button,)


@app.cell
def _(loaded, merge_button, out, settings):
    # an `if`, not mo.stop: in Jupyter (the exported notebook) a stopped cell is an error
    if merge_button.value or (settings.merge and not nb.interactive()):
        merged = sft.merge_adapter(loaded, out / "merged")
        print(f"merged model written to {merged}")
        _msg = mo.md(f"Merged model: `{merged}`")
    else:
        _msg = mo.md("Not merged (`merge = false` in the preset; press the button to merge).")
    _msg
    return


if __name__ == "__main__":
    app.run()
