"""Phase orchestration shared by the CLI, the notebooks and ``agentrl demo``: preset in, run directories out.

Each function reads a preset (dict from :func:`agentrl.core.config.load_preset`), skips work whose outputs
already exist (unless told to rebuild) and returns the paths it produced, so reruns resume.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from agentrl.core.io import DataError
from agentrl.data.corpus import CorpusConfig, build_corpus, read_corpus
from agentrl.retrieval import DenseConfig, IndexConfig, build_index


@dataclass
class CorpusRun:
    """Where phase 00 put its outputs."""

    corpus_dir: Path
    index_dir: Path
    built: bool


def corpus_paths(preset: dict, runs: str | Path = "runs") -> tuple[Path, Path]:
    """Return ``(corpus_dir, index_dir)`` of the preset's phase-00 run (they may not exist yet): under its
    ``[corpus] name``."""
    name = (preset.get("corpus") or {}).get("name") or CorpusConfig.name
    corpus_dir = Path(runs) / "corpus" / name
    return corpus_dir, corpus_dir / "index"


def corpus_and_index(corpus: CorpusConfig, index: IndexConfig, *, runs: str | Path = "runs", rebuild: bool = False,
                     progress: bool = True) -> CorpusRun:
    """Build the corpus and index (the preset's ``[corpus]`` and ``[index]``; the index embeds with the corpus
    embedder unless ``[index.dense]`` names one) under ``runs/corpus/<name>/`` unless they exist; return the paths."""
    corpus_dir = Path(runs) / "corpus" / corpus.name
    index_dir = corpus_dir / "index"
    built = False
    if rebuild or not (corpus_dir / "corpus.jsonl").exists():
        build_corpus(corpus_dir, qa=corpus.qa, corpus_file=corpus.corpus_file, embedder=corpus.embedder,
                     chunk_size=corpus.chunk_size or None, chunk_overlap=corpus.chunk_overlap, limit=corpus.limit,
                     progress=progress)
        built = True
    if built or not (index_dir / "index.json").exists():
        build_index(read_corpus(corpus_dir), index_dir, with_embedder(index, corpus), progress=progress)
        built = True
    return CorpusRun(corpus_dir, index_dir, built)


def with_embedder(index: IndexConfig, corpus: CorpusConfig) -> IndexConfig:
    """Return ``index`` embedding with the corpus's embedder (its chunks were sized by that tokenizer) unless the
    index names an embedder of its own."""
    if index.dense.embedder != DenseConfig.embedder:
        return index
    return replace(index, dense=replace(index.dense, embedder=corpus.embedder))


def eval_qa_path(preset: dict) -> str:
    """Return the QA file whose contexts the preset's corpus was built from (``[corpus] qa``): what retrieval is
    evaluated on."""
    qa = (preset.get("corpus") or {}).get("qa")
    if not qa:
        raise DataError("the preset's corpus comes from no QA file ([corpus] qa): nothing to evaluate retrieval on")
    return qa
