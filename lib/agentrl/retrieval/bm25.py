"""Sparse retrieval with bm25s: one tokenizer (stopwords + Snowball stemmer) for corpus and queries.

Stemming only one side is a silent recall loss ("running" never meets "run"), so both sides go through
:func:`tokenize`. The index is saved with bm25s and loaded memory-mapped.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, Fraction, NonNegative


@dataclass
class BM25Config:
    """BM25 parameters. k1=0.9, b=0.4 are Pyserini's defaults for passage retrieval over Wikipedia."""

    k1: NonNegative = 0.9
    b: Fraction = 0.4
    method: Literal["robertson", "lucene", "atire", "bm25l", "bm25+"] = "lucene"  # bm25s's variants
    stopwords: str | None = "en"
    stemmer: str | None = "english"
    # "numba" is ~40x faster per query but JIT-compiles for several seconds in every process.
    backend: Literal["auto", "numpy", "numba"] = "auto"
    numba_min_docs: AtLeast0 = 50_000


def tokenize(texts: list[str], cfg: BM25Config) -> list[list[str]]:
    """Return the BM25 token lists of ``texts`` (lower-cased, stopwords removed, stemmed per ``cfg``)."""
    import bm25s

    stemmer = _stemmer(cfg.stemmer) if cfg.stemmer else None
    return bm25s.tokenize(texts, stopwords=cfg.stopwords, stemmer=stemmer, return_ids=False, show_progress=False)


@functools.cache
def _stemmer(language: str):
    import Stemmer

    return Stemmer.Stemmer(language)


class BM25Index:
    """A bm25s index plus the config its tokens were made with."""

    def __init__(self, retriever, cfg: BM25Config):
        self.retriever, self.cfg = retriever, cfg
        self.n_docs = int(retriever.scores["num_docs"])

    @classmethod
    def build(cls, texts: list[str], cfg: BM25Config | None = None) -> BM25Index:
        """Return an index over ``texts`` (tokenised with :func:`tokenize`)."""
        import bm25s

        cfg = cfg or BM25Config()
        if not texts:
            raise DataError("cannot build a BM25 index over an empty corpus")
        retriever = bm25s.BM25(k1=cfg.k1, b=cfg.b, method=cfg.method, backend=_backend(cfg, len(texts)))
        retriever.index(tokenize(texts, cfg), show_progress=False)
        return cls(retriever, cfg)

    def save(self, directory: str | Path) -> None:
        """Write the index files and ``bm25_config.json`` into ``directory``."""
        directory = Path(directory)
        self.retriever.save(str(directory))
        (directory / "bm25_config.json").write_text(json.dumps(asdict(self.cfg), indent=2))

    @classmethod
    def load(cls, directory: str | Path, *, mmap: bool = True, backend: str | None = None) -> BM25Index:
        """Return the index saved in ``directory`` (arrays memory-mapped by default)."""
        import bm25s

        directory = Path(directory)
        cfg_path = directory / "bm25_config.json"
        if not cfg_path.exists():
            raise DataError(f"{directory}: not a BM25 index (bm25_config.json missing)")
        cfg = BM25Config(**json.loads(cfg_path.read_text()))
        if backend:
            cfg.backend = backend
        try:
            retriever = bm25s.BM25.load(str(directory), mmap=mmap, load_corpus=False)
        except (FileNotFoundError, json.JSONDecodeError, ValueError) as exc:
            raise DataError(f"{directory}: BM25 index files missing or unreadable ({exc})") from None
        _plain_views(retriever)
        index = cls(retriever, cfg)
        retriever.backend = _backend(cfg, index.n_docs)
        return index

    def search_tokens(self, query_tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(doc_indices, scores)`` arrays of shape (n_queries, k'), k' = min(k, n_docs).

        Zero scores mean "no query term matched"; callers drop those hits.
        """
        k = min(k, self.n_docs)
        ids = np.full((len(query_tokens), k), -1, dtype=np.int64)
        scores = np.zeros((len(query_tokens), k), dtype=np.float32)
        # a query with no searchable term ("the of and", "?") matches nothing; bm25s raises on it, and in a
        # batch that would fail every other query, so it is left out and gets no hit.
        # n_threads=0, not 1: bm25s starts a ThreadPoolExecutor per call for any n_threads >= 1 on the numpy
        # backend, a thread hop per query that cost more than the scoring (0.42 vs 0.18 ms/query, batches of 32)
        live = [i for i, toks in enumerate(query_tokens) if toks]
        if live and self.retriever.backend == "numpy":
            for i in live:
                found, values = top_positive(self.retriever.get_scores(query_tokens[i]), k)
                ids[i, :len(found)], scores[i, :len(found)] = found, values
        elif live:
            res = self.retriever.retrieve([query_tokens[i] for i in live], k=k, show_progress=False, n_threads=0)
            ids[live], scores[live] = np.asarray(res.documents), np.asarray(res.scores)
        return ids, scores

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokenise ``queries`` like the corpus and return ``(doc_indices, scores)`` (see search_tokens)."""
        return self.search_tokens(tokenize(queries, self.cfg), k)


def top_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(indices, scores)`` of the at most ``k`` best positive scores, best first, equal scores by index.

    BM25 scores are zero for every document without a query term, and numpy's selection degrades on long runs
    of equal values: ``argpartition`` over 2,234 mostly-zero scores took 210 us, 9x its time on distinct values,
    the largest cost of a query on the numpy backend. Selecting among the matching documents only is exact.
    """
    candidates = np.flatnonzero(scores > 0)
    values = scores[candidates]
    if len(candidates) > k:
        # every candidate up to the k-th best value, ties with it included: ordered by (score descending, index)
        # and then cut, which tied document stays is deterministic
        keep = values >= np.partition(values, -k)[-k]
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:k]
    return candidates[order], values[order]


def _plain_views(retriever) -> None:
    # np.memmap is an ndarray subclass whose __array_finalize__ and __getitem__ are Python code, run on every
    # slice bm25s takes per query term: a fifth of a query's CPU on the sample index. A plain ndarray view reads the
    # same mapped pages (still lazy, still shared between processes) without the subclass.
    for holder in (retriever.__dict__, retriever.scores):
        for key, value in list(holder.items()):
            if isinstance(value, np.memmap):
                holder[key] = value.view(np.ndarray)


def _backend(cfg: BM25Config, n_docs: int) -> str:
    if cfg.backend != "auto":
        return cfg.backend
    return "numba" if n_docs >= cfg.numba_min_docs else "numpy"
