"""Hybrid retrieval: BM25 (bm25s) + dense (sentence-transformers + faiss) + rank fusion."""

from agentrl.retrieval.bm25 import BM25Config, BM25Index
from agentrl.retrieval.dense import DenseConfig, DenseIndex, Embedder
from agentrl.retrieval.fusion import fuse_batch, normalized, rrf
from agentrl.retrieval.index import Hit, IndexConfig, Retriever, build_index

__all__ = ["BM25Config", "BM25Index", "DenseConfig", "DenseIndex", "Embedder", "Hit", "IndexConfig", "Retriever",
           "build_index", "fuse_batch", "normalized", "rrf"]
