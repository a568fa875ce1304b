import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")

with app.setup:
    import marimo as mo
    import polars as pl

    from agentrl.app import notebook as nb
    from agentrl.core.io import read_json
    from agentrl.core.progress import quiet_library_output
    from agentrl.data.pipeline import corpus_and_index, corpus_paths, eval_qa_path
    from agentrl.retrieval import Retriever
    from agentrl.retrieval.evaluate import recall_chart, results_table, run_retrieval_eval

    nb.use_repo_root()


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # 00 · Corpus and hybrid retrieval

    Pools the passages of a QA set's contexts (or loads a corpus file), chunks them by embedder tokens,
    builds a **BM25 + dense + fusion** index and measures it against the gold supporting passages —
    over all gold and over the gold that is actually in the corpus.

    Headless: `uv run python notebooks/00_corpus.py -- --config demo` (or `agentrl corpus / index /
    retrieval-eval`). Without `--config` every notebook picks the same preset: the GPU preset for the card it
    finds (docs/colab.md), else `demo`. Writes `runs/corpus/<name>/` (corpus, index, `retrieval_eval.json`).
    """)
    return


@app.cell
def _():
    args = nb.cli_args("00_corpus")
    preset, which = nb.choose_preset(args)
    rebuild = nb.arg(args, "rebuild", False)
    print(which.replace("**", ""))
    mo.md(f"{which} · corpus `{preset['corpus']}`")
    return preset, rebuild


@app.cell
def _():
    build_button = mo.ui.run_button(label="Build corpus + index")
    build_button
    return (build_button,)


@app.cell
def _(build_button, preset, rebuild):
    ready = (corpus_paths(preset.data)[1] / "index.json").exists()
    mo.stop(nb.interactive() and not (ready or build_button.value),
            mo.md("Press **Build corpus + index** to start (about a minute of embedding on CPU)."))
    quiet_library_output()  # the spinner says what runs; no "Loading weights" bar from the embedder
    with mo.status.spinner("Building corpus and index (about a minute of embedding on CPU)…"):
        run = corpus_and_index(preset.settings("corpus"), preset.settings("index"),
                               rebuild=rebuild or build_button.value)
    mo.md(f"Index: `{run.index_dir}` ({'built now' if run.built else 'reused'})")
    return (run,)


@app.cell
def _():
    eval_button = mo.ui.run_button(label="Evaluate retrieval")
    eval_button
    return (eval_button,)


@app.cell
def _(eval_button, preset, run):
    # an earlier evaluation of this index shows directly; a new one (about 30 s on CPU) waits for the button
    _saved = run.index_dir.parent / "retrieval_eval.json"
    _fresh = _saved.is_file() and read_json(_saved).get("inputs", {}).get("index") == str(run.index_dir)
    mo.stop(nb.interactive() and not (_fresh or eval_button.value),
            mo.md("Press **Evaluate retrieval** to measure recall@k of BM25, dense and hybrid on the QA set "
                  "(about 30 s on CPU)."))
    if eval_button.value or not _fresh:
        with mo.status.spinner("Evaluating retrieval…"):
            report = run_retrieval_eval(run.index_dir, eval_qa_path(preset.data))
    else:
        report = read_json(_saved)
    s = report["summary"]
    if not nb.interactive():  # run as a script: the table goes to the terminal (in marimo the cell shows it)
        print(f"{s['questions']} questions: {s['gold_absent_from_corpus']} of {s['gold_titles']} gold passages "
              f"are absent from the corpus; {s['questions_all_gold_present']} questions have all their gold.")
        print(results_table(report).select("method", "recall@2", "recall@5", "recall@10", "recall@5_reachable",
                                           "ndcg@10"))
    mo.vstack([mo.md(f"**{s['gold_absent_from_corpus']} / {s['gold_titles']}** gold passages are not in the "
                     "corpus; `_reachable` columns count only the rest."
                     + ("" if eval_button.value or not _fresh else f" (saved in `{_saved}`; the button re-runs it)")),
               results_table(report), recall_chart(report)])
    return


@app.cell
def _(run):
    retriever = Retriever.load(run.index_dir)
    method = mo.ui.dropdown(["hybrid", "bm25", "dense"], value="hybrid", label="method")
    top_k = mo.ui.slider(1, 20, value=5, label="top k")
    query = mo.ui.text(value="Who directed the film Ed Wood?", label="query", full_width=True)
    mo.hstack([query, method, top_k])
    return method, query, retriever, top_k


@app.cell
def _(method, query, retriever, top_k):
    hits = retriever.search(query.value, top_k.value, method.value) if query.value.strip() else []
    pl.DataFrame([{"rank": i + 1, "score": h.score, "title": h.title, "text": h.text[:200]}
                  for i, h in enumerate(hits)])
    return


if __name__ == "__main__":
    app.run()
