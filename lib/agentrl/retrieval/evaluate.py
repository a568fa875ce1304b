"""Retrieval evaluation against gold evidence (HotpotQA/2Wiki supporting titles, MuSiQue supporting paragraphs,
MultiHop-RAG evidence titles and facts: ``fact_hits@k`` / ``fact_recall@k`` as its own evaluation counts them).

Relevance is by title: a passage is relevant when its title is a gold supporting title, and a title is
credited once however many of its chunks are retrieved. Gold titles absent from the corpus cannot be
retrieved by any method, so every metric is reported twice: over all gold and over *reachable* gold.

Metrics per method (k in ``ks``): ``recall@k`` (share of gold titles in the top-k passages, averaged over
questions), ``all_gold@k`` (share of questions with every gold title in the top k), ``mrr@10`` and
``ndcg@10`` (binary relevance). The ``_reachable`` variants use only gold present in the corpus and only
questions that have some.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from agentrl.core.io import DataError, write_json
from agentrl.data.corpus import first_row_without, gold_titles, load_qa, warn_rows_without
from agentrl.data.multihop_rag import fact_metrics, gold_facts
from agentrl.retrieval import Retriever

DEFAULT_KS = (1, 2, 5, 10, 20)


def question_metrics(ranked_titles: Sequence[str], gold: set[str], ks: Sequence[int]) -> dict[str, float]:
    """Return recall@k, all_gold@k, mrr@10 and ndcg@10 for one ranking of passage titles against ``gold``."""
    out: dict[str, float] = {}
    for k in ks:
        found = gold & set(ranked_titles[:k])
        out[f"recall@{k}"] = len(found) / len(gold)
        out[f"all_gold@{k}"] = float(found == gold)
    credited: set[str] = set()
    dcg, rr = 0.0, 0.0
    for rank, title in enumerate(ranked_titles[:10], start=1):
        if title in gold and title not in credited:
            credited.add(title)
            dcg += 1.0 / math.log2(rank + 1)
            rr = rr or 1.0 / rank
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), 10)))
    out["mrr@10"] = rr
    out["ndcg@10"] = dcg / ideal
    return out


def evaluate_retrieval(retriever, rows: list[dict], *, methods: Sequence[str] = ("bm25", "dense", "hybrid"),
                       ks: Sequence[int] = DEFAULT_KS, batch_size: int = 256, source: str = "the QA rows") -> dict:
    """Return ``{"summary": {...}, "methods": {method: {metric: value}}}`` for the rows' gold evidence.

    ``summary`` counts questions, gold titles, gold titles absent from the corpus and questions whose gold
    is fully present. Raises DataError when no row carries gold evidence.
    """
    titles = retriever.titles()
    corpus_titles = set(titles.tolist())
    evaluable = [(r, set(gold_titles(r))) for r in rows]
    evaluable = [(r, g) for r, g in evaluable if g]
    if not evaluable:
        msg = first_row_without(rows, gold_titles, "gold evidence", source)
        raise DataError(f"no question carries gold evidence: {msg}")
    warn_rows_without(rows, gold_titles, "gold evidence", source)
    n_gold = sum(len(g) for _, g in evaluable)
    absent = sum(len(g - corpus_titles) for _, g in evaluable)
    summary = {
        "questions": len(evaluable),
        "questions_without_gold": len(rows) - len(evaluable),
        "gold_titles": n_gold,
        "gold_absent_from_corpus": absent,
        "gold_present_share": round(1 - absent / n_gold, 4),
        "questions_all_gold_present": sum(1 for _, g in evaluable if g <= corpus_titles),
        "questions_some_gold_present": sum(1 for _, g in evaluable if g & corpus_titles),
    }
    depth = max(max(ks), 10)
    results: dict[str, dict[str, float]] = {}
    for method in methods:
        sums: dict[str, float] = {}
        sums_r: dict[str, float] = {}
        n_r = 0
        for start in range(0, len(evaluable), batch_size):
            chunk = evaluable[start:start + batch_size]
            ranked = retriever.rank_batch([r["question"] for r, _ in chunk], depth, method)
            for (_, gold), hits in zip(chunk, ranked, strict=True):
                ranked_titles = [titles[i] for i, _ in hits]
                for key, v in question_metrics(ranked_titles, gold, ks).items():
                    sums[key] = sums.get(key, 0.0) + v
                reachable = gold & corpus_titles
                if reachable:
                    n_r += 1
                    for key, v in question_metrics(ranked_titles, reachable, ks).items():
                        sums_r[key] = sums_r.get(key, 0.0) + v
        row = {k: round(v / len(evaluable), 4) for k, v in sums.items()}
        row.update({f"{k}_reachable": round(v / max(n_r, 1), 4) for k, v in sums_r.items()})
        row.update(_fact_metrics(retriever, rows, method, ks, batch_size))
        results[method] = row
    return {"summary": summary, "ks": list(ks), "methods": results}


def _fact_metrics(retriever, rows: list[dict], method: str, ks: Sequence[int], batch_size: int) -> dict:
    """Return MultiHop-RAG's fact-based metrics (``fact_hits@k``, ``fact_recall@k``: an evidence fact occurs in a
    retrieved raw chunk, whitespace removed from both) averaged over the rows with evidence facts; {} without."""
    with_facts = [(r, gold_facts(r)) for r in rows]
    with_facts = [(r, f) for r, f in with_facts if f]
    if not with_facts:
        return {}
    sums: dict[str, float] = {}
    for start in range(0, len(with_facts), batch_size):
        chunk = with_facts[start:start + batch_size]
        hits = retriever.search_batch([r["question"] for r, _ in chunk], max(ks), method, distinct=False)
        for (_, facts), found in zip(chunk, hits, strict=True):
            for key, v in fact_metrics([h.text for h in found], facts, ks).items():
                sums[key] = sums.get(key, 0.0) + v
    return {k: round(v / len(with_facts), 4) for k, v in sums.items()}


def results_table(report: dict):
    """Return a polars DataFrame with one row per method and the headline metrics as columns."""
    import polars as pl

    ks = report["ks"]
    cols = [f"recall@{k}" for k in ks] + [f"recall@{k}_reachable" for k in ks if k in (5, 10)]
    cols += ["all_gold@5", "all_gold@5_reachable", "mrr@10", "ndcg@10", "ndcg@10_reachable"]
    cols += [f"fact_hits@{k}" for k in ks if k in (1, 5, 10)]  # MultiHop-RAG rows: its own Hits@k on evidence facts
    rows = []
    for method, m in report["methods"].items():
        rows.append({"method": method, **{c: m.get(c) for c in cols if c in m}})
    return pl.DataFrame(rows)


def recall_chart(report: dict):
    """Return an altair line chart of recall@k (all gold and reachable gold) per method."""
    import altair as alt
    import polars as pl

    rows = []
    for method, m in report["methods"].items():
        for k in report["ks"]:
            rows.append({"method": method, "k": k, "gold": "all gold", "recall": m[f"recall@{k}"]})
            if f"recall@{k}_reachable" in m:
                rows.append({"method": method, "k": k, "gold": "reachable gold", "recall": m[f"recall@{k}_reachable"]})
    return (
        alt.Chart(pl.DataFrame(rows))
        .mark_line(point=True)
        .encode(x=alt.X("k:Q", scale=alt.Scale(type="log", base=2)),
                y=alt.Y("recall:Q", scale=alt.Scale(domain=[0, 1])),
                # dash and point shape both tell all gold from reachable gold (the legend showed two equal dots)
                color="method:N", strokeDash="gold:N", shape="gold:N", tooltip=["method", "k", "gold", "recall"])
        .properties(title="Retrieval recall@k", width=420, height=260)
    )


def run_retrieval_eval(index_dir: str | Path, qa: str | Path, *, out_dir: str | Path | None = None,
                       methods: Sequence[str] = ("bm25", "dense", "hybrid"), ks: Sequence[int] = DEFAULT_KS,
                       limit: int | None = None, chart: bool = True, distinct: bool | None = None) -> dict:
    """Evaluate the index at ``index_dir`` on the QA file and write ``retrieval_eval.json`` (+ PNG chart).

    ``out_dir`` defaults to the corpus run directory that holds the index; ``distinct`` overrides the index's
    setting (distinct documents, or raw chunks with False). Returns the report.
    """
    retriever = Retriever.load(index_dir, dense=any(m != "bm25" for m in methods), overrides={"distinct": distinct})
    rows = load_qa(qa, limit=limit)
    report = evaluate_retrieval(retriever, rows, methods=methods, ks=ks, source=str(qa))
    report["inputs"] = {"index": str(index_dir), "qa": str(qa)}
    report["index_config"] = retriever.manifest.get("config")
    report["distinct"] = retriever.cfg.distinct
    out = Path(out_dir) if out_dir else Path(index_dir).parent
    write_json(out / "retrieval_eval.json", report)
    if chart:
        recall_chart(report).save(str(out / "retrieval_recall.png"), scale_factor=2)
    return report


def print_retrieval_report(report: dict) -> None:
    """Print the retrieval summary and the per-method table."""
    import polars as pl

    s = report["summary"]
    print(f"{s['questions']} questions, {s['gold_titles']} gold passages, {s['gold_absent_from_corpus']} absent "
          f"from the corpus ({100 * (1 - s['gold_present_share']):.1f}%); "
          f"{s['questions_all_gold_present']} questions have all their gold in the corpus")
    with pl.Config(tbl_cols=20, tbl_width_chars=200, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        print(results_table(report))
