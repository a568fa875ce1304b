"""Phase orchestration shared by the CLI, the notebooks and ``agentrl demo``: preset in, run directories out.

Each function reads a preset (dict from :func:`agentrl.core.config.load_preset`), skips work whose outputs
already exist (unless told to rebuild) and returns the paths it produced, so reruns resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentrl.core.config import from_dict
from agentrl.core.io import DataError


@dataclass
class CorpusRun:
    """Where phase 00 put its outputs."""

    corpus_dir: Path
    index_dir: Path
    built: bool


def corpus_configs(preset: dict):
    """Return the preset's ``(CorpusConfig, IndexConfig)``; the index embeds with the corpus embedder."""
    from agentrl.data.corpus import CorpusConfig
    from agentrl.retrieval import IndexConfig

    ccfg = from_dict(CorpusConfig, preset.get("corpus"), "corpus")
    raw_index = dict(preset.get("index") or {})
    raw_index["dense"] = {"embedder": ccfg.embedder, **(raw_index.get("dense") or {})}
    return ccfg, from_dict(IndexConfig, raw_index, "index")


def corpus_paths(preset: dict, runs: str | Path = "runs") -> tuple[Path, Path]:
    """Return ``(corpus_dir, index_dir)`` of the preset's phase-00 run (they may not exist yet)."""
    ccfg, _ = corpus_configs(preset)
    corpus_dir = Path(runs) / "corpus" / ccfg.name
    return corpus_dir, corpus_dir / "index"


def corpus_and_index(preset: dict, *, runs: str | Path = "runs", rebuild: bool = False,
                     progress: bool = True) -> CorpusRun:
    """Build the preset's corpus and index under ``runs/corpus/<name>/`` unless they exist; return the paths."""
    from agentrl.data.corpus import build_corpus, read_corpus
    from agentrl.retrieval import build_index

    ccfg, icfg = corpus_configs(preset)
    corpus_dir, index_dir = corpus_paths(preset, runs)
    built = False
    if rebuild or not (corpus_dir / "corpus.jsonl").exists():
        build_corpus(corpus_dir, qa=ccfg.qa, corpus_file=ccfg.corpus_file, embedder=ccfg.embedder,
                     chunk_size=ccfg.chunk_size or None, chunk_overlap=ccfg.chunk_overlap, limit=ccfg.limit,
                     progress=progress)
        built = True
    if built or not (index_dir / "index.json").exists():
        build_index(read_corpus(corpus_dir), index_dir, icfg, progress=progress)
        built = True
    return CorpusRun(corpus_dir, index_dir, built)


def eval_qa_path(preset: dict) -> str:
    """Return the QA file the preset evaluates on (``[eval].qa``, else the corpus QA file)."""
    qa = (preset.get("eval") or {}).get("qa") or (preset.get("corpus") or {}).get("qa")
    if not qa:
        raise DataError("the preset names no QA file ([eval].qa or [corpus].qa)")
    return qa
