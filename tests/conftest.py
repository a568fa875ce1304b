"""Shared fixtures: real data from data/samples, a real (small) hybrid index built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl"
DBBENCH = ROOT / "data" / "samples" / "dbbench_dev.jsonl"


@pytest.fixture(scope="session")
def hotpot_rows():
    from agentrl.corpus import load_qa

    return load_qa(HOTPOT)


@pytest.fixture(scope="session")
def embedder():
    from agentrl.retrieval import DenseConfig, Embedder

    return Embedder(DenseConfig())


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, hotpot_rows, embedder) -> Path:
    """A hybrid index over the contexts of the first 24 sample questions (about 240 passages)."""
    from agentrl.corpus import Chunker, chunk_documents, documents_from_contexts
    from agentrl.retrieval import build_index

    docs = documents_from_contexts(hotpot_rows[:24])
    passages = list(chunk_documents(docs, Chunker(embedder.tokenizer, 200, 32)))
    out = tmp_path_factory.mktemp("index") / "index"
    build_index(passages, out, embedder=embedder, progress=False)
    return out


@pytest.fixture(scope="session")
def small_retriever(small_index):
    from agentrl.retrieval import Retriever

    return Retriever.load(small_index)
