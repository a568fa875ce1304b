"""Rank fusion for hybrid retrieval: reciprocal rank fusion and weighted sums of normalised scores.

Both are pure functions of their inputs. Ties are broken by the best rank a document reached in any
list, then by its corpus position, so the fused order never depends on timing or dict order.

Example (RRF, k=60): bm25 ranks [7, 3], dense ranks [3, 9] ->
doc 3 scores 1/62 + 1/61, doc 7 scores 1/61, doc 9 scores 1/62 -> order [3, 7, 9].
"""

from __future__ import annotations

from collections.abc import Sequence


def rrf(rankings: Sequence[Sequence[int]], k: float = 60.0, weights: Sequence[float] | None = None,
        ) -> list[tuple[int, float]]:
    """Return ``[(doc, score)]`` fused by reciprocal rank fusion, best first.

    ``rankings`` are lists of document ids in rank order (rank 1 first); score = sum_i w_i / (k + rank_i).
    """
    if k <= 0:
        raise ValueError(f"rrf k must be > 0 (got {k})")
    weights = weights or [1.0] * len(rankings)
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
            best[doc] = min(best.get(doc, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def normalized(scored: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float] | None = None,
               norm: str = "zscore") -> list[tuple[int, float]]:
    """Return ``[(doc, score)]`` fused by a weighted sum of per-list normalised scores, best first.

    Each input list holds ``(doc, raw_score)`` best first. ``norm="zscore"`` standardises a list's scores
    (mean 0, std 1); ``"minmax"`` scales them to [0, 1]. A document missing from a list ranked below that
    list's cut-off, so it gets the list's lowest normalised score for it.
    """
    if norm not in ("zscore", "minmax"):
        raise ValueError(f"unknown score normalisation '{norm}' (zscore, minmax)")
    weights = weights or [1.0] * len(scored)
    normed: list[tuple[dict[int, float], float]] = []
    best: dict[int, int] = {}
    for hits in scored:
        values = [s for _, s in hits]
        if not values:
            normed.append(({}, 0.0))
            continue
        if norm == "zscore":
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            scaled = [(v - mean) / std if std > 0 else 0.0 for v in values]
        else:
            lo, hi = min(values), max(values)
            scaled = [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
        normed.append(({doc: x for (doc, _), x in zip(hits, scaled, strict=True)}, min(scaled)))
        for rank, (doc, _) in enumerate(hits, start=1):
            best[doc] = min(best.get(doc, rank), rank)
    scores = {doc: sum(w * table.get(doc, floor) for (table, floor), w in zip(normed, weights, strict=True))
              for doc in best}
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
