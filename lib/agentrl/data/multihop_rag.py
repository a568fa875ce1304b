"""MultiHop-RAG (Tang & Yang, 2024) in its published layout, converted with the seed's rules into the files every
phase reads: a corpus file, and training / validation QA files.

The Hugging Face dataset ``yixuantt/MultiHopRAG`` has two configs: ``MultiHopRAG`` (``MultiHopRAG.json``: 2,556
questions with ``query``, ``answer``, ``question_type``, ``evidence_list`` of ``{title, author, url, source,
category, published_at, fact}``) and ``corpus`` (``corpus.json``: 609 news articles with ``title``, ``author``,
``source``, ``published_at``, ``category``, ``url``, ``body``). The seed's conversion (DeepSearch-RL):

- an article is the document ``title\\nbody``; the other fields are kept as metadata;
- the questions are shuffled with Python's ``random.seed(42)`` then ``random.shuffle``; validation is the first
  200, training the rest (2,356);
- null queries (``question_type`` ``null_query``, answer "Insufficient information") are kept and scored like any
  other question (F1 / EM / acc against that answer).

Gold evidence for retrieval evaluation is the ``evidence_list`` facts: a fact is found when it occurs in a retrieved
chunk with all whitespace removed from both (MultiHop-RAG's own retrieval evaluation); the evidence titles are the
gold titles of the title-based metrics (agentrl.data.corpus.gold_titles).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from agentrl.core.io import DataError, staged_dir, write_jsonl
from agentrl.core.manifest import write_manifest

HUB = "yixuantt/MultiHopRAG"
FILES = {"MultiHopRAG": "MultiHopRAG.json", "corpus": "corpus.json"}  # hub config -> its file
SEED = 42
VALIDATION = 200
NULL_ANSWER = "Insufficient information"
QUESTION_FIELDS = ("query", "answer", "question_type", "evidence_list")
ARTICLE_FIELDS = ("title", "body")


def read_records(source: str | Path, config: str) -> list[dict]:
    """Return the records of ``config`` ("MultiHopRAG" or "corpus") from ``source``: ``hf:yixuantt/MultiHopRAG``
    (datasets.load_dataset; offline from its cache), a directory holding the hub's files (``MultiHopRAG.json``,
    ``corpus.json``: a JSON array, or JSON lines), or one such file. A record without the config's fields is a
    DataError naming the file and record."""
    src = str(source)
    if src.startswith("hf:"):
        import datasets  # heavy; only for real runs

        try:
            records = [dict(r) for r in datasets.load_dataset(src[3:], config, split="train")]
        except Exception as exc:  # no network and no cache, an unknown name: say which and why
            raise DataError(f"{src} ({config}): cannot load the dataset ({type(exc).__name__}: {exc})") from None
        where = f"{src}:{config}"
    else:
        path = Path(src)
        path = path / FILES[config] if path.is_dir() else path
        if not path.is_file():
            raise DataError(f"{path}: not found (expected the hub's {FILES[config]})")
        where = str(path)
        records = _read_json_or_jsonl(path)
    required = QUESTION_FIELDS if config == "MultiHopRAG" else ARTICLE_FIELDS
    for i, rec in enumerate(records):
        missing = [f for f in required if f not in rec]
        if missing:
            raise DataError(f"{where}: record {i + 1} lacks '{missing[0]}' (a {config} record has "
                            f"{', '.join(required)})")
    if not records:
        raise DataError(f"{where}: no records")
    return records


def _read_json_or_jsonl(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        if isinstance(data, list):
            return data
        raise DataError(f"{path}: expected a JSON array of records or JSON lines")
    except json.JSONDecodeError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
    return out


def documents(articles: list[dict]) -> list[dict]:
    """Return corpus records (``id`` = the article's index, as the seed numbers them; ``contents`` =
    ``title\\nbody``; ``metadata`` = the other fields) for the articles, in order."""
    return [{"id": str(i), "contents": f"{a['title']}\n{a['body']}",
             "metadata": {k: v for k, v in a.items() if k not in ("title", "body")}} for i, a in enumerate(articles)]


def task_rows(questions: list[dict]) -> dict[str, list[dict]]:
    """Return ``{"validation": rows, "train": rows}``: the questions as task rows (id = the index in the file, as
    the seed numbers them; ``golden_answers`` [answer]; metadata question_type / evidence_list), shuffled with the
    seed's ``random.seed(42)``; validation the first 200."""
    rows = [{"id": str(i), "question": q["query"], "golden_answers": [q["answer"]],
             "metadata": {"question_type": q["question_type"], "type": q["question_type"],
                          "evidence_list": list(q["evidence_list"] or [])}}
            for i, q in enumerate(questions)]
    random.Random(SEED).shuffle(rows)  # the seed's random.seed(42); random.shuffle(data): same generator, same order
    for i, r in enumerate(rows):
        r["metadata"]["split"] = "validation" if i < VALIDATION else "train"
    return {"validation": rows[:VALIDATION], "train": rows[VALIDATION:]}


def prepare(source: str | Path, out_dir: str | Path) -> dict:
    """Write ``out_dir/corpus.jsonl`` (a corpus file for ``agentrl corpus``), ``validation.jsonl`` and
    ``train.jsonl`` (QA files) and ``manifest.json`` from ``source`` (see :func:`read_records`); return the
    counts. The directory is replaced as a whole, so a failure leaves the previous one in place."""
    articles = read_records(source, "corpus")
    split = task_rows(read_records(source, "MultiHopRAG"))
    counts = {"documents": len(articles), "validation": len(split["validation"]), "train": len(split["train"]),
              "null_queries": sum(r["metadata"]["question_type"] == "null_query"
                                  for rows in split.values() for r in rows)}
    with staged_dir(out_dir) as stage:
        write_jsonl(stage / "corpus.jsonl", documents(articles))
        for name, rows in split.items():
            write_jsonl(stage / f"{name}.jsonl", rows)
        write_manifest(stage, phase="multihop_rag", name=Path(out_dir).name, config={"seed": SEED,
                       "validation": VALIDATION}, counts=counts, inputs={"source": str(source)})
    return counts


def gold_facts(row: dict) -> list[str]:
    """Return the evidence facts of a MultiHop-RAG task row ([] for a row without them, e.g. a null query)."""
    ev = (row.get("metadata") or {}).get("evidence_list") or []
    return [str(e["fact"]) for e in ev if isinstance(e, dict) and e.get("fact")]


_SPACE = re.compile(r"\s+")


def squeeze(text: str) -> str:
    """Return ``text`` without whitespace (MultiHop-RAG compares facts and chunks this way)."""
    return _SPACE.sub("", text)


def fact_metrics(chunks: list[str], facts: list[str], ks) -> dict[str, float]:
    """Return, for one question, ``fact_hits@k`` (1 when any fact occurs in one of the top-k chunks, as
    MultiHop-RAG's Hits@k) and ``fact_recall@k`` (the share of its facts found in the top k)."""
    gold = [squeeze(f) for f in facts]
    found_at = {}
    for rank, chunk in enumerate(chunks, start=1):
        text = squeeze(chunk)
        for g in gold:
            if g not in found_at and g in text:
                found_at[g] = rank
    out = {}
    for k in ks:
        hits = [g for g, r in found_at.items() if r <= k]
        out[f"fact_hits@{k}"] = float(bool(hits))
        out[f"fact_recall@{k}"] = len(hits) / len(gold)
    return out
