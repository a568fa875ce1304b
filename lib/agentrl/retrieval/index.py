"""The hybrid retriever: BM25 + dense + fusion over one passage store, saved as one index directory.

Index directory layout::

    index.json            manifest: embedder, dimension, counts, every parameter
    passages.jsonl        passage records, read by memory map (passages.offsets.npy)
    bm25/                 bm25s arrays (memory-mapped on load)
    dense.faiss           faiss index

Example::

    r = Retriever.load("runs/corpus/hotpotqa/index")
    r.search("Who directed Ed Wood?", top_k=3)   # -> [Hit(id="12-0", title="Ed Wood (film)", ...), ...]
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from agentrl.core.io import DataError, read_json, staged_dir, write_json
from agentrl.core.validate import AtLeast1, NonNegative, Positive
from agentrl.retrieval.bm25 import BM25Config, BM25Index
from agentrl.retrieval.cache import QueryVectorCache
from agentrl.retrieval.dense import DenseConfig, DenseIndex, Embedder
from agentrl.retrieval.fusion import METHODS as FUSIONS
from agentrl.retrieval.fusion import fuse_batch
from agentrl.retrieval.store import PassageStore, write_passages

METHODS = ("bm25", "dense", "hybrid")
# Settings that may differ from the saved ones at load time; the rest are baked into the index files.
SEARCH_TIME: dict[str, set[str]] = {
    "method": set(), "fusion": set(), "rrf_k": set(), "weights": set(), "depth": set(), "distinct": set(),
    "bm25": {"backend", "numba_min_docs"},
    "dense": {"ef_search", "nprobe", "faiss_threads", "batch_size", "device"},
}
FORMAT_VERSION = 1


@dataclass
class IndexConfig:
    """Everything that shapes retrieval results; saved in ``index.json``."""

    bm25: BM25Config = field(default_factory=BM25Config)
    dense: DenseConfig = field(default_factory=DenseConfig)
    method: Literal["bm25", "dense", "hybrid"] = "hybrid"
    # z-scored score sum beat RRF and min-max on the HotpotQA sample without any weight tuning
    # (docs/decisions.md); RRF stays available for score scales that z-scores handle badly.
    fusion: Literal["zscore", "minmax", "rrf"] = "zscore"
    rrf_k: Positive = 60.0
    weights: tuple[NonNegative, NonNegative] = (1.0, 1.0)  # (bm25, dense)
    depth: AtLeast1 = 50  # candidates taken from each retriever before fusion
    # top_k distinct documents (best chunk each; one title = one document): chunks of one document or two
    # documents with one title otherwise fill several of the few slots the agent reads (docs/decisions.md)
    distinct: bool = True

    @classmethod
    def from_dict(cls, d: dict) -> IndexConfig:
        """Return a config from its dict form (as saved in index.json or written in a preset)."""
        d = dict(d)
        bm25 = BM25Config(**d.pop("bm25", {}))
        dense = DenseConfig(**d.pop("dense", {}))
        if "weights" in d:
            d["weights"] = tuple(d["weights"])
        return cls(bm25=bm25, dense=dense, **d)


@dataclass
class Hit:
    """One retrieved passage."""

    id: str
    title: str
    text: str
    score: float
    index: int


def passage_text(p: dict) -> str:
    """Return the text indexed for a passage: its title on the first line, then the body."""
    return f"{p['title']}\n{p['text']}" if p.get("title") else p["text"]


def build_index(passages: list[dict], out_dir: str | Path, cfg: IndexConfig | None = None, *,
                embedder: Embedder | None = None, progress: bool = True) -> Path:
    """Build BM25 + dense indexes over ``passages`` into ``out_dir`` (replaced atomically); return its path."""
    cfg = cfg or IndexConfig()
    _check_cfg(cfg)
    if not passages:
        raise DataError("cannot build an index over an empty corpus")
    texts = [passage_text(p) for p in passages]
    embedder = embedder or Embedder(cfg.dense)
    vectors = embedder.encode_passages(texts, progress=progress)
    with staged_dir(out_dir) as stage:
        n = write_passages(stage, passages)
        bm25 = BM25Index.build(texts, cfg.bm25)
        bm25.save(stage / "bm25")
        dense = DenseIndex.build(vectors, cfg.dense)
        dense.save(stage / "dense.faiss")
        write_json(stage / "index.json", {
            "format": FORMAT_VERSION,
            "n_passages": n,
            "n_documents": len({p.get("doc_id", p["id"]) for p in passages}),
            "embedder": cfg.dense.embedder,
            "dimension": dense.dim,
            "config": asdict(cfg),
        })
    return Path(out_dir)


def _check_cfg(cfg: IndexConfig) -> None:
    if cfg.method not in METHODS:
        raise DataError(f"unknown retrieval method '{cfg.method}' (choose from {', '.join(METHODS)})")
    if cfg.fusion not in FUSIONS:
        raise DataError(f"unknown fusion '{cfg.fusion}' (choose from {', '.join(FUSIONS)})")
    if cfg.depth <= 0:
        raise DataError(f"depth must be > 0 (got {cfg.depth})")


class Retriever:
    """Search an index directory by BM25, dense vectors or their fusion. Safe to call from many threads."""

    def __init__(self, directory: str | Path, cfg: IndexConfig, store: PassageStore, bm25: BM25Index,
                 dense: DenseIndex | None, manifest: dict):
        self.directory, self.cfg, self.store, self.bm25, self.dense = Path(directory), cfg, store, bm25, dense
        self.manifest = manifest
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()
        # encoding is ~95% of a hybrid query's time on CPU: vectors of recent queries are kept (bounded LRU)
        self.query_cache = QueryVectorCache(max_entries=20_000, max_bytes=64 * 2**20)
        self._keys: dict[int, tuple[str, str]] = {}  # passage index -> (document identity, passage id)
        self.key_cache_size = 1_000_000
        self.tie_depth = 4096  # candidates fetched at most to order a tie at the k-th distinct document

    @classmethod
    def load(cls, directory: str | Path, *, dense: bool = True, overrides: dict | None = None) -> Retriever:
        """Return the retriever saved in ``directory``; ``overrides`` replace saved search-time settings.

        A missing directory, missing files or counts that disagree raise DataError naming the problem.
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise DataError(f"{directory}: index directory not found (build it with `agentrl index`)")
        manifest = read_json(directory / "index.json")
        raw = dict(manifest.get("config") or {})
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key not in SEARCH_TIME:
                raise DataError(f"'{key}' is fixed when the index is built; rebuild the index to change it")
            if isinstance(value, dict):
                fixed = set(value) - SEARCH_TIME[key]
                if fixed:
                    raise DataError(f"{key}.{sorted(fixed)[0]} is fixed when the index is built; rebuild to change it")
                raw[key] = {**raw.get(key, {}), **value}
            else:
                raw[key] = value
        cfg = IndexConfig.from_dict(raw)
        _check_cfg(cfg)
        store = PassageStore(directory)
        bm25 = BM25Index.load(directory / "bm25")
        dindex = DenseIndex.load(directory / "dense.faiss", cfg.dense) if dense else None
        n = manifest.get("n_passages")
        counts = {"passages.jsonl": len(store), "bm25": bm25.n_docs}
        if dindex is not None:
            counts["dense.faiss"] = dindex.ntotal
            if dindex.dim != manifest.get("dimension"):
                raise DataError(f"{directory}: dense.faiss has dimension {dindex.dim}, "
                                f"index.json says {manifest.get('dimension')}")
        bad = {k: v for k, v in counts.items() if v != n}
        if bad:
            raise DataError(f"{directory}: index files disagree with index.json ({n} passages): {bad}")
        return cls(directory, cfg, store, bm25, dindex, manifest)

    @property
    def embedder(self) -> Embedder:
        """The query embedder, loaded on first dense search."""
        with self._lock:
            if self._embedder is None:
                self._embedder = Embedder(self.cfg.dense)
            return self._embedder

    def __len__(self) -> int:
        return len(self.store)

    def search(self, query: str, top_k: int = 5, method: str | None = None) -> list[Hit]:
        """Return the ``top_k`` best passages for one query (see search_batch)."""
        return self.search_batch([query], top_k, method)[0]

    def search_batch(self, queries: list[str], top_k: int = 5, method: str | None = None,
                     distinct: bool | None = None) -> list[list[Hit]]:
        """Return the ``top_k`` best passages for each query, best first.

        ``method`` is bm25, dense or hybrid (default: the index's). ``distinct`` (default: the index's, on)
        returns the best chunk of each of the ``top_k`` best documents; off, raw chunks. Raises DataError for
        an empty query, ``top_k <= 0`` or an unknown method.
        """
        ranked = self.rank_batch(queries, top_k, method, distinct)
        return [[self._hit(i, s) for i, s in row] for row in ranked]

    def rank_batch(self, queries: list[str], top_k: int = 5, method: str | None = None,
                   distinct: bool | None = None) -> list[list[tuple[int, float]]]:
        """Return ``[(passage_index, score)]`` per query without reading passage text (used by evaluation).

        With ``distinct`` (default: the index's setting) each document appears once, by its best chunk, and
        equal scores are ordered by document title (case-folded), then passage id.
        """
        distinct = self.cfg.distinct if distinct is None else distinct
        if distinct and isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0:
            return self._rank_distinct(queries, top_k, method)
        method = method or self.cfg.method
        if method not in METHODS:
            raise DataError(f"unknown retrieval method '{method}' (choose from {', '.join(METHODS)})")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
            raise DataError(f"top_k must be a positive integer (got {top_k!r})")
        for q in queries:
            if not isinstance(q, str) or not q.strip():
                raise DataError("query must be a non-empty string")
        if method in ("dense", "hybrid") and self.dense is None:
            raise DataError(f"{self.directory}: loaded without the dense index; use method='bm25'")
        depth = max(top_k, self.cfg.depth) if method == "hybrid" else top_k
        lists = []
        if method in ("bm25", "hybrid"):
            ids, scores = self.bm25.search(queries, depth)
            lists.append((np.where(scores > 0, ids, -1), scores))  # score 0 = no query term matched: no hit
        if method in ("dense", "hybrid"):
            lists.append(self.dense.search(self.query_vectors(queries), depth))
        if method == "hybrid":
            fused = fuse_batch([i for i, _ in lists], [s for _, s in lists], self.cfg.fusion, self.cfg.weights,
                               self.cfg.rrf_k)
            return [list(zip(d[:top_k].tolist(), s[:top_k].tolist(), strict=True)) for d, s in fused]
        ids, scores = lists[0]
        return [[(int(i), float(x)) for i, x in zip(row_i, row_s, strict=True) if i >= 0][:top_k]
                for row_i, row_s in zip(ids, scores, strict=True)]

    def query_vectors(self, queries: list[str]) -> np.ndarray:
        """Return the query embeddings, encoding only the queries not seen recently (one batch for all misses)."""
        found = self.query_cache.get_many(queries)
        missing = list(dict.fromkeys(q for q in queries if q not in found))
        if missing:
            vecs = self.embedder.encode_queries(missing)
            self.query_cache.put_many(missing, vecs)
            found.update(zip(missing, vecs, strict=True))
        return np.stack([found[q] for q in queries])

    def doc_key(self, i: int) -> str:
        """Return the document identity of passage ``i``: its title (case-folded), else its doc_id."""
        return self._doc(i)[0]

    def _doc(self, i: int) -> tuple[str, str]:
        """``(document identity, passage id)`` of passage ``i``, cached."""
        info = self._keys.get(i)
        if info is None:
            p = self.store[i]
            title = str(p.get("title") or "").strip().casefold()
            info = (title or f"doc:{p.get('doc_id', p.get('id'))}", str(p.get("id")))
            if len(self._keys) >= self.key_cache_size:
                self._keys.clear()  # bounded; refilling costs one passage read per candidate
            self._keys[i] = info
        return info

    def _rank_distinct(self, queries: list[str], top_k: int, method: str | None) -> list[list[tuple[int, float]]]:
        # Over-fetch raw chunks and keep each document's best; a query whose candidates hold fewer than top_k
        # documents (one long document can fill any fixed depth) fetches twice as many, until it has top_k or its
        # candidate list ends. It also fetches more when the k-th document's score ties the last candidate's,
        # so a tie is ordered over all tied candidates (up to tie_depth of them).
        out: list = [None] * len(queries)
        pending, wanted = list(range(len(queries))), max(4 * top_k, top_k + 20)
        while pending:
            ranked = self.rank_batch([queries[q] for q in pending], wanted, method, False)
            left = []
            for q, row in zip(pending, ranked, strict=True):
                docs, open_tie = self._distinct(row, top_k)
                exhausted = len(row) < wanted or wanted >= len(self)
                if exhausted or (len(docs) == top_k and (not open_tie or wanted >= self.tie_depth)):
                    out[q] = docs
                else:
                    left.append(q)
            pending, wanted = left, wanted * 2
        return out

    def _distinct(self, ranked: list[tuple[int, float]], top_k: int) -> tuple[list[tuple[int, float]], bool]:
        """Return the best chunk of each of the first ``top_k`` documents in ``ranked`` (equal scores ordered by
        title, then passage id) and whether the scores tied with the last one taken run to the end of ``ranked``
        (a deeper fetch could hold more of the tie)."""
        seen: set[str] = set()
        out: list[tuple[int, float]] = []
        start, n = 0, len(ranked)
        while start < n and len(out) < top_k:
            end = start + 1
            while end < n and ranked[end][1] == ranked[start][1]:
                end += 1
            group = ranked[start:end]
            if len(group) > 1:
                group = sorted(group, key=lambda c: self._doc(c[0]))
            for i, score in group:  # best first, so the first chunk seen of a document is its best one
                key = self.doc_key(i)
                if key not in seen:
                    seen.add(key)
                    out.append((i, score))
                    if len(out) == top_k:
                        break
            start = end
        return out, start >= n

    def _hit(self, i: int, score: float) -> Hit:
        p = self.store[i]
        return Hit(id=str(p["id"]), title=p.get("title", ""), text=p["text"], score=round(float(score), 6), index=i)

    def titles(self) -> np.ndarray:
        """Return the title of every passage, by position (reads the whole store once)."""
        return np.array([p.get("title", "") for p in self.store], dtype=object)
