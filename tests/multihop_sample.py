"""A small MultiHop-RAG in the hub's published layout (``MultiHopRAG.json`` + ``corpus.json``, JSON arrays with the
hub's field names), for tests without network: a few news articles and questions whose evidence facts are
sentences of those articles, null queries included."""

from __future__ import annotations

import json
from pathlib import Path

ARTICLES = [
    ("Harbor City council approves tram extension", "Metro Ledger", "Sophie Tan", "technology",
     "The Harbor City council voted 7 to 2 on Tuesday to extend the waterfront tram line by four stations. "
     "Construction is expected to begin in March and cost 210 million dollars. Mayor Elena Ruiz called the vote "
     "a turning point for the eastern districts."),
    ("Orbital Labs unveils reusable cargo capsule", "Space Wire", "Daniel Okafor", "science",
     "Orbital Labs presented its Kestrel capsule, designed to fly twelve cargo missions before retirement. "
     "The company said the first flight to the Meridian station is planned for autumn. Chief engineer Priya "
     "Nair said the heat shield was the hardest part to get right."),
    ("Northfield Rovers sign veteran goalkeeper", "Sports Daily", "Marco Bellini", "sports",
     "Northfield Rovers have signed goalkeeper Tomas Varga on a two-year contract. Varga, 34, previously "
     "played eleven seasons for Eastport United. Coach Linda Shaw said his experience would steady a young "
     "defence."),
    ("Greenleaf Foods recalls almond snack bars", "Business Post", "Hannah Meyer", "business",
     "Greenleaf Foods is recalling 40,000 boxes of almond snack bars after a labelling error omitted a peanut "
     "warning. Customers can return the bars to any store for a full refund. The company said no illnesses "
     "had been reported."),
    ("Riverside museum opens ancient textiles wing", "Culture Today", "Amira Haddad", "entertainment",
     "The Riverside Museum opened a new wing dedicated to ancient textiles on Saturday. The collection "
     "includes a 2,000-year-old woven tunic found near the Salt Lakes. Curator Jonas Berg said the wing took "
     "five years to prepare."),
    ("Eastport United appoints new head coach", "Sports Daily", "Marco Bellini", "sports",
     "Eastport United named Rafael Ortiz as head coach after a disappointing season. Ortiz previously led "
     "the youth academy at Northfield Rovers. The club said he signed a three-year deal."),
]

# (question, answer, type, [(article index, fact sentence index)])
TEMPLATES = [
    ("Which goalkeeper joined Northfield Rovers after eleven seasons at the club that later hired Rafael Ortiz?",
     "Tomas Varga", "inference_query", [(2, 1), (5, 0)]),
    ("Did the Harbor City tram vote and the Greenleaf Foods recall both report figures in the tens of thousands "
     "or more?", "Yes", "comparison_query", [(0, 1), (3, 0)]),
    ("Which company's capsule is planned to fly to the Meridian station?", "Orbital Labs", "inference_query",
     [(1, 1)]),
    ("Was the Riverside Museum wing opened before the Orbital Labs capsule's first flight?", "Yes",
     "temporal_query", [(4, 0), (1, 1)]),
    ("Who won the 1987 lunar chess championship?", "Insufficient information", "null_query", []),
]


def _sentences(body: str) -> list[str]:
    return [s.strip() + "." for s in body.split(". ") if s.strip()]


def write_hub_layout(out: Path, questions: int = 230) -> Path:
    """Write ``out/MultiHopRAG.json`` and ``out/corpus.json`` in the hub's layout: the six articles and
    ``questions`` questions (the templates numbered, so each is a distinct question); return ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    corpus = [{"title": t, "author": a, "source": s, "published_at": f"2023-10-0{i + 1}T10:00:00+00:00",
               "category": c, "url": f"https://news.example/{i}", "body": b}
              for i, (t, s, a, c, b) in enumerate(ARTICLES)]
    records = []
    for n in range(questions):
        q, answer, kind, evidence = TEMPLATES[n % len(TEMPLATES)]
        ev = [{**{k: corpus[a][k] for k in ("title", "author", "url", "source", "category", "published_at")},
               "fact": _sentences(corpus[a]["body"])[s]} for a, s in evidence]
        records.append({"query": f"{q} (case {n})", "answer": answer, "question_type": kind, "evidence_list": ev})
    (out / "MultiHopRAG.json").write_text(json.dumps(records, indent=1))
    (out / "corpus.json").write_text(json.dumps(corpus, indent=1))
    return out
