"""Rank fusion for hybrid retrieval: reciprocal rank fusion and weighted sums of normalised scores.

:func:`fuse_batch` fuses a whole batch of queries with a fixed number of numpy operations (no Python loop
per query or per candidate), so fusion stays a small share of a hybrid query. Ties are broken by the best
rank a document reached in any list, then by its corpus position, so the order never depends on timing.

Example (RRF, k=60): bm25 ranks [7, 3], dense ranks [3, 9] ->
doc 3 scores 1/62 + 1/61, doc 7 scores 1/61, doc 9 scores 1/62 -> order [3, 7, 9].

Normalised fusion: ``zscore`` standardises each list's scores (mean 0, std 1 over its candidates),
``minmax`` scales them to [0, 1]; a document missing from a list ranked below that list's cut-off, so it
gets the list's lowest normalised score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

METHODS = ("zscore", "minmax", "rrf")


def fuse_batch(ids: Sequence[np.ndarray], scores: Sequence[np.ndarray], method: str = "zscore",
               weights: Sequence[float] | None = None, k: float = 60.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fuse several ranked lists per query; return ``[(doc_ids, fused_scores)]`` per query, best first.

    ``ids[j]`` and ``scores[j]`` are (n_queries, depth_j) arrays of list j in rank order; an id < 0 marks
    an empty slot (e.g. a BM25 hit with no matching term). ``method`` is zscore, minmax or rrf.
    """
    if method not in METHODS:
        raise ValueError(f"unknown fusion '{method}' (choose from {', '.join(METHODS)})")
    if method == "rrf" and k <= 0:
        raise ValueError(f"rrf k must be > 0 (got {k})")
    weights = list(weights) if weights is not None else [1.0] * len(ids)
    nq = ids[0].shape[0]
    base = np.zeros(nq)
    rows, docs, vals, ranks = [], [], [], []
    for list_ids, list_scores, w in zip(ids, scores, weights, strict=True):
        list_ids = np.asarray(list_ids, dtype=np.int64).reshape(nq, -1)
        list_scores = np.asarray(list_scores, dtype=np.float64).reshape(nq, -1)
        valid = list_ids >= 0
        rank = np.broadcast_to(np.arange(1, list_ids.shape[1] + 1), list_ids.shape)
        if method == "rrf":
            val = w / (k + rank)
        else:
            norm = _normalise(list_scores, valid, method)
            floor = np.where(valid, norm, np.inf).min(axis=1)
            floor = np.where(np.isfinite(floor), floor, 0.0)
            base += w * floor  # every candidate starts from each list's floor ...
            val = w * (norm - floor[:, None])  # ... and lists that hold it add the rest
        r = np.nonzero(valid)
        rows.append(r[0])
        docs.append(list_ids[r])
        vals.append(val[r])
        ranks.append(rank[r])
    row, doc, val, rank = (np.concatenate(x) for x in (rows, docs, vals, ranks))
    span = int(doc.max()) + 1 if doc.size else 1
    keys, inverse = np.unique(row * span + doc, return_inverse=True)
    total = np.bincount(inverse, weights=val, minlength=len(keys))
    best = np.full(len(keys), np.iinfo(np.int64).max)
    np.minimum.at(best, inverse, rank)
    key_row, key_doc = keys // span, keys % span
    total = total + base[key_row]
    order = np.lexsort((key_doc, best, -total, key_row))
    bounds = np.cumsum(np.bincount(key_row, minlength=nq))[:-1]
    return list(zip(np.split(key_doc[order], bounds), np.split(total[order], bounds), strict=True))


def _normalise(scores: np.ndarray, valid: np.ndarray, method: str) -> np.ndarray:
    count = valid.sum(axis=1, keepdims=True)
    safe = np.where(valid, scores, 0.0)
    if method == "zscore":
        mean = safe.sum(axis=1, keepdims=True) / np.maximum(count, 1)
        std = np.sqrt((np.where(valid, scores - mean, 0.0) ** 2).sum(axis=1, keepdims=True) / np.maximum(count, 1))
        return np.where(std > 0, (scores - mean) / np.where(std > 0, std, 1.0), 0.0)
    lo = np.where(valid, scores, np.inf).min(axis=1, keepdims=True)
    hi = np.where(valid, scores, -np.inf).max(axis=1, keepdims=True)
    span = hi - lo
    return np.where(span > 0, (scores - lo) / np.where(span > 0, span, 1.0), 1.0)


def _pad(lists: Sequence[Sequence[tuple[int, float]]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    ids = [np.array([[d for d, _ in hits]], dtype=np.int64).reshape(1, -1) for hits in lists]
    scores = [np.array([[s for _, s in hits]], dtype=np.float64).reshape(1, -1) for hits in lists]
    return ids, scores


def rrf(rankings: Sequence[Sequence[int]], k: float = 60.0, weights: Sequence[float] | None = None,
        ) -> list[tuple[int, float]]:
    """Return ``[(doc, score)]`` fused by reciprocal rank fusion for one query, best first.

    ``rankings`` are lists of document ids in rank order; score = sum_i w_i / (k + rank_i).
    """
    ids, scores = _pad([[(d, 0.0) for d in r] for r in rankings])
    doc, total = fuse_batch(ids, scores, "rrf", weights, k)[0]
    return list(zip(doc.tolist(), total.tolist(), strict=True))


def normalized(scored: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float] | None = None,
               norm: str = "zscore") -> list[tuple[int, float]]:
    """Return ``[(doc, score)]`` fused by a weighted sum of per-list normalised scores for one query."""
    ids, scores = _pad(scored)
    doc, total = fuse_batch(ids, scores, norm, weights)[0]
    return list(zip(doc.tolist(), total.tolist(), strict=True))
