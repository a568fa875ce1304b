"""Phase 00 data: QA task rows, passage corpora and token-based chunking.

Task rows follow FlashRAG's JSONL layout ``{"id", "question", "golden_answers", "metadata"}``; original
HotpotQA / 2WikiMultihopQA / MuSiQue rows are normalised into it. A passage corpus is pooled from the
per-question contexts (de-duplicated) or loaded from a corpus JSONL (``id``+``contents`` as FlashRAG writes
it, or ``id``+``title``+``text``), then chunked by tokens of the embedder's tokenizer.

Passage record written to ``corpus.jsonl``::

    {"id": "17-0", "doc_id": "17", "chunk": 0, "title": "Ed Wood", "text": "Edward Davis Wood Jr. ..."}
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.core.config import data_file
from agentrl.core.io import DataError, iter_jsonl, read_jsonl, staged_dir, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.metrics import gold_list
from agentrl.core.validate import AtLeast0, AtLeast1, SettingError, file_or
from agentrl.retrieval.dense import resolve_embedder

QA_FIELDS = ("id", "question", "golden_answers")


# ----------------------------------------------------------------------------- QA rows


def normalize_row(rec: dict, where: str = "") -> dict:
    """Return ``rec`` as a FlashRAG task row, accepting original HotpotQA/2Wiki/MuSiQue field names.

    ``where`` (``"file:line"``) prefixes error messages. Raises DataError naming a missing field.
    """
    rec = dict(rec)
    meta = dict(rec.pop("metadata", None) or {})
    rid = rec.pop("id", None)
    if rid is None:
        rid = rec.pop("_id", None)
    if rid is None or str(rid) == "":
        raise DataError(f"{where}: missing field 'id'")
    question = rec.pop("question", None)
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: missing field 'question' (or it is empty)")
    gold = rec.pop("golden_answers", None)
    if gold is None and "answer" in rec:
        gold = [rec.pop("answer")] + list(rec.pop("answer_aliases", None) or [])
    if gold is None:
        raise DataError(f"{where}: missing field 'golden_answers'")
    try:
        gold = gold_list(gold)
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None
    meta.update(rec)  # context, supporting_facts, paragraphs, type, ... of the original layouts
    return {"id": str(rid), "question": question.strip(), "golden_answers": gold, "metadata": meta}


def load_qa(source: str | Path, *, split: str = "dev", limit: int | None = None) -> list[dict]:
    """Return task rows from a JSONL file, or from a Hugging Face dataset given as ``hf:NAME[:CONFIG]``.

    Rows are normalised with :func:`normalize_row`; duplicate ids, an empty set and malformed lines raise
    DataError naming the file and line.
    """
    src = str(source)
    if src.startswith("hf:"):
        rows = list(_load_hf(src[3:], split, limit))
        where = src
    else:
        src = str(data_file(src))  # the bundled data/samples/ files from any working directory
        rows, where = [], src
        for lineno, rec in iter_jsonl(src):
            rows.append(normalize_row(rec, f"{src}:{lineno}"))
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise DataError(f"{where}: no questions")
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        if row["id"] in seen:
            raise DataError(f"{where}: duplicate id '{row['id']}' (rows {seen[row['id']] + 1} and {i + 1})")
        seen[row["id"]] = i
    return rows


def _load_hf(spec: str, split: str, limit: int | None) -> Iterator[dict]:
    import datasets  # heavy; only for real runs with network access

    name, _, config = spec.partition(":")
    ds = datasets.load_dataset(name, config or None, split=split)
    for i, rec in enumerate(ds):
        if limit is not None and i >= limit:
            break
        yield normalize_row(rec, f"hf:{spec}[{i}]")


# ----------------------------------------------------------------------------- gold evidence + contexts


def _join_sentences(sentences: Iterable[str]) -> str:
    out = ""
    for s in sentences:
        s = str(s)
        if out and not out[-1].isspace() and s and not s[0].isspace():
            out += " "
        out += s
    return out.strip()


# Where a row's passages live, per dataset layout (detected per row: one file may mix them).
LAYOUTS = {
    "hotpotqa-flashrag": "metadata.context = {title: [..], sentences: [[..]]} (+ supporting_facts {title, sent_id})",
    "hotpotqa/2wiki": "context = [[title, [sentences]], ..] (+ supporting_facts [[title, sent_id], ..])",
    "2wiki-flashrag": "metadata.context = {title: [..], content: [[..]]} (+ supporting_facts)",
    "musique": "paragraphs = [{title, paragraph_text, is_supporting}, ..]",
    "musique-flashrag": "metadata.question_decomposition = [{support_paragraph: {title, paragraph_text, "
                        "is_supporting}}, ..]",
    "multihop-rag": "metadata.evidence_list = [{title, fact, ..}, ..] (gold only: the passages are a corpus file; "
                    "null queries carry none)",
}


def supported_layouts() -> str:
    """Return a one-line-per-layout description of the evidence layouts rows may use (for error messages)."""
    return "; ".join(f"{name}: {where}" for name, where in LAYOUTS.items())


def _musique_paragraphs(meta: dict) -> list[dict]:
    paras = [p for p in meta.get("paragraphs") or [] if isinstance(p, dict)]
    for step in meta.get("question_decomposition") or []:
        para = step.get("support_paragraph") if isinstance(step, dict) else None
        if isinstance(para, dict):
            # FlashRAG keeps only the decomposition's supporting paragraphs; they are gold unless marked otherwise
            paras.append({**para, "is_supporting": para.get("is_supporting", True)})
    return paras


def evidence_layout(row: dict) -> str | None:
    """Return the name (a key of LAYOUTS) of the layout holding the row's passages, or None when it has none."""
    meta = row.get("metadata") or {}
    ctx = meta.get("context")
    if isinstance(ctx, dict):
        return "2wiki-flashrag" if "content" in ctx and "sentences" not in ctx else "hotpotqa-flashrag"
    if isinstance(ctx, list) and ctx:
        return "hotpotqa/2wiki"
    if any(isinstance(p, dict) for p in meta.get("paragraphs") or []):
        return "musique"
    if any(isinstance(s, dict) and isinstance(s.get("support_paragraph"), dict)
           for s in meta.get("question_decomposition") or []):
        return "musique-flashrag"
    return None


def context_paragraphs(row: dict) -> list[tuple[str, str]]:
    """Return the ``(title, text)`` paragraphs attached to a task row, whatever its dataset layout (LAYOUTS).

    Handles FlashRAG/HotpotQA ``context: {"title": [..], "sentences": [[..]]}`` (2Wiki: ``content``), original
    HotpotQA/2Wiki ``context: [[title, [sentences]], ..]``, MuSiQue ``paragraphs: [{"title",
    "paragraph_text"}]`` and FlashRAG's MuSiQue ``question_decomposition[].support_paragraph``. Duplicates
    within the row are kept once.
    """
    meta = row.get("metadata") or {}
    out: list[tuple[str, str]] = []
    ctx = meta.get("context")
    if isinstance(ctx, dict):
        titles = ctx.get("title") or []
        bodies = ctx.get("sentences") or ctx.get("content") or []
        for title, body in zip(titles, bodies, strict=False):
            out.append((str(title), _join_sentences(body) if isinstance(body, list) else str(body)))
    elif isinstance(ctx, list):
        for item in ctx:
            if isinstance(item, list | tuple) and len(item) == 2:
                title, body = item
                out.append((str(title), _join_sentences(body) if isinstance(body, list) else str(body)))
    for para in _musique_paragraphs(meta):
        text = para.get("paragraph_text") or para.get("text") or ""
        out.append((str(para.get("title", "")), str(text)))
    return list(dict.fromkeys((t.strip(), x) for t, x in out if x.strip()))


def gold_titles(row: dict) -> list[str]:
    """Return the titles of the gold supporting passages of a task row (unique, in order).

    HotpotQA/2Wiki ``supporting_facts`` (FlashRAG dict or original list form), MuSiQue paragraphs
    with ``is_supporting`` (native ``paragraphs`` or FlashRAG's ``question_decomposition``) and MultiHop-RAG's
    ``evidence_list`` titles. Empty when the row
    carries no evidence annotation.
    """
    meta = row.get("metadata") or {}
    titles: list[str] = []
    sf = meta.get("supporting_facts")
    if isinstance(sf, dict):
        titles += [str(t) for t in sf.get("title") or []]
    elif isinstance(sf, list):
        titles += [str(item[0]) for item in sf if isinstance(item, list | tuple) and item]
    for para in _musique_paragraphs(meta):
        if para.get("is_supporting"):
            titles.append(str(para.get("title", "")))
    titles += [str(e.get("title", "")) for e in meta.get("evidence_list") or [] if isinstance(e, dict)]  # MultiHop-RAG
    return list(dict.fromkeys(t.strip() for t in titles if str(t).strip()))


def first_row_without(rows: list[dict], has, what: str, source) -> str:
    """Return an error message naming ``source``, the first row (1-based, with its id) for which ``has(row)``
    is false (it has no ``what``), and the supported layouts."""
    for i, row in enumerate(rows, 1):
        if not has(row):
            return (f"{source}: row {i} (id {row.get('id')!r}) has no {what} in any known layout; "
                    f"supported layouts: {supported_layouts()}")
    return f"{source}: supported layouts: {supported_layouts()}"


def warn_rows_without(rows: list[dict], has, what: str, source) -> int:
    """Warn when some (not all) ``rows`` have no ``what`` (``has(row)`` false: no known layout holds it) and are
    skipped, naming ``source``, how many and the first one's line (its row number for a non-file source); return
    the count. All rows without it is an error for the caller to raise (see :func:`first_row_without`)."""
    missing = [i for i, row in enumerate(rows) if not has(row)]
    if missing and len(missing) < len(rows):
        first = rows[missing[0]]
        warnings.warn(f"{source}: {len(missing)} of {len(rows)} rows have no {what} in any known layout and were "
                      f"skipped; the first is {_line_of(source, missing[0])} (id {first.get('id')!r}); supported "
                      f"layouts: {supported_layouts()}", stacklevel=2)
    return len(missing)


def _line_of(source, index: int) -> str:
    """``line N`` of the ``index``-th record (0-based) of a JSONL file ``source``, else ``row index+1``."""
    path = Path(str(source))
    if not str(source).startswith("hf:") and path.is_file():
        for n, (lineno, _) in enumerate(iter_jsonl(path)):
            if n == index:
                return f"line {lineno}"
    return f"row {index + 1}"


# ----------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Document:
    """One source document before chunking."""

    doc_id: str
    title: str
    text: str


def documents_from_contexts(rows: Iterable[dict]) -> list[Document]:
    """Return the de-duplicated documents pooled from the rows' contexts (first occurrence wins).

    Two paragraphs are duplicates when title and text are identical.
    """
    seen: set[tuple[str, str]] = set()
    docs: list[Document] = []
    for row in rows:
        for title, text in context_paragraphs(row):
            key = (title, text)
            if key in seen:
                continue
            seen.add(key)
            docs.append(Document(str(len(docs)), title, text))
    return docs


def load_corpus_file(path: str | Path, limit: int | None = None) -> list[Document]:
    """Return documents from a corpus JSONL: ``id``+``contents`` (FlashRAG: first line is the title) or
    ``id``+``title``+``text``. Missing fields and duplicate ids raise DataError naming file and line."""
    docs: list[Document] = []
    ids: set[str] = set()
    for lineno, rec in iter_jsonl(path):
        where = f"{path}:{lineno}"
        if "id" not in rec:
            raise DataError(f"{where}: missing field 'id'")
        if "contents" in rec:
            title, _, text = str(rec["contents"]).partition("\n")
            title = title.strip().strip('"')
            if not text:  # a single-line passage has no title line
                title, text = str(rec.get("title", "")), title
        elif "text" in rec:
            title, text = str(rec.get("title", "")), str(rec["text"])
        else:
            raise DataError(f"{where}: missing field 'contents' (or 'text')")
        doc_id = str(rec["id"])
        if doc_id in ids:
            raise DataError(f"{where}: duplicate id '{doc_id}'")
        ids.add(doc_id)
        docs.append(Document(doc_id, title.strip(), text.strip()))
        if limit is not None and len(docs) >= limit:
            break
    if not docs:
        raise DataError(f"{path}: empty corpus")
    return docs


# ----------------------------------------------------------------------------- chunking


class Chunker:
    """Split text into windows of ``size`` tokens with ``overlap`` tokens shared by neighbours.

    Tokens come from the embedder's tokenizer so chunks fit its input; chunk text is sliced from the
    original string by character offsets, so nothing is lost or re-spelled by detokenisation.
    """

    def __init__(self, tokenizer: Any, size: int = 200, overlap: int = 32):
        if size <= 0:
            raise DataError(f"chunk size must be > 0 (got {size})")
        if overlap < 0 or overlap >= size:
            raise DataError(f"chunk overlap must be >= 0 and < size (got overlap={overlap}, size={size})")
        self.tokenizer, self.size, self.overlap = tokenizer, size, overlap

    def split(self, text: str) -> list[str]:
        """Return the chunks of ``text`` (``[]`` for empty text, ``[text]`` when it fits in one chunk).

        Chunk edges snap back to word starts so no word is cut in half (unless one word exceeds ``size``).
        """
        if not text.strip():
            return []
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = [o for o in enc["offset_mapping"] if o[1] > o[0]]
        n = len(offsets)
        if n <= self.size:
            return [text.strip()]
        # a token starts a word when text (whitespace) separates it from the previous token
        word_start = [i == 0 or offsets[i][0] > offsets[i - 1][1] for i in range(n)] + [True]
        chunks, pos = [], 0
        while True:
            end = min(pos + self.size, n)
            snapped = next((e for e in range(end, pos, -1) if word_start[e]), end)
            chunks.append(text[offsets[pos][0]:offsets[snapped - 1][1]].strip())
            if snapped >= n:
                return chunks
            nxt = snapped - self.overlap
            pos = next((s for s in range(nxt, pos, -1) if word_start[s]), max(nxt, pos + 1))


def chunk_documents(docs: Iterable[Document], chunker: Chunker | None) -> Iterator[dict]:
    """Yield passage records (``id``, ``doc_id``, ``chunk``, ``title``, ``text``) for every chunk of ``docs``.

    ``chunk`` counts 0, 1, ... within each document; with ``chunker=None`` each document is one passage.
    """
    for doc in docs:
        pieces = chunker.split(doc.text) if chunker is not None else ([doc.text] if doc.text.strip() else [])
        for i, piece in enumerate(pieces):
            yield {"id": f"{doc.doc_id}-{i}", "doc_id": doc.doc_id, "chunk": i, "title": doc.title, "text": piece}


# ----------------------------------------------------------------------------- run directory


def embedder_tokenizer(embedder: str):
    """Return the Hugging Face tokenizer of an embedder (by alias, path or hub id), without its weights."""
    from transformers import AutoTokenizer

    path = resolve_embedder(embedder)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=Path(path).exists())
    tok.model_max_length = 10**9  # chunking reads whole documents; the model never sees them unsplit
    return tok


def build_corpus(out_dir: str | Path, *, qa: str | Path | None = None, corpus_file: str | Path | None = None,
                 embedder: str = "minilm", chunk_size: int | None = 200, chunk_overlap: int = 32,
                 limit: int | None = None, progress: bool = True) -> dict:
    """Write ``out_dir/corpus.jsonl`` + ``manifest.json`` from a QA set's contexts or a corpus file.

    Returns the manifest counts. ``chunk_size=None`` keeps one passage per document. The directory is
    replaced atomically, so a failure leaves the previous corpus in place.
    """
    from tqdm.auto import tqdm

    if (qa is None) == (corpus_file is None):
        raise DataError("give exactly one of a QA file (contexts are pooled) or a corpus file")
    chunker = Chunker(embedder_tokenizer(embedder), chunk_size, chunk_overlap) if chunk_size else None
    if qa is not None:
        rows = load_qa(qa, limit=limit)
        docs = documents_from_contexts(rows)
        if not docs:
            msg = first_row_without(rows, context_paragraphs, "context paragraphs", qa)
            raise DataError(f"{msg} (or give --corpus-file)")
        warn_rows_without(rows, context_paragraphs, "context paragraphs", qa)
    else:
        docs = load_corpus_file(corpus_file, limit=limit)
    bar = tqdm(docs, desc="chunking", unit="doc", disable=None if progress else True)  # None: off without a TTY
    passages = list(chunk_documents(bar, chunker))
    if not passages:
        raise DataError("the corpus is empty after chunking (all documents have empty text)")
    counts = {"documents": len(docs), "passages": len(passages),
              "chunked_documents": sum(1 for p in passages if p["chunk"] == 1)}
    config = {"embedder": embedder, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "limit": limit}
    with staged_dir(out_dir) as stage:
        write_jsonl(stage / "corpus.jsonl", passages)
        write_manifest(stage, phase="corpus", name=Path(out_dir).name, config=config, counts=counts,
                       inputs={"qa": qa, "corpus_file": corpus_file} if qa else {"corpus_file": corpus_file})
    return counts


def read_corpus(corpus_dir: str | Path) -> list[dict]:
    """Return the passages of a corpus run directory (or a corpus.jsonl path)."""
    path = Path(corpus_dir)
    path = path / "corpus.jsonl" if path.is_dir() else path
    passages = read_jsonl(path, required=("id", "title", "text"))
    if not passages:
        raise DataError(f"{path}: empty corpus")
    return passages


DEFAULT_QA = "data/samples/hotpotqa_dev_200.jsonl"  # the bundled HotpotQA sample: corpus and search QA by default
QASource = file_or("", "hf:")  # a QA or corpus file that exists, a hub dataset (hf:NAME[:CONFIG]), or "" (none)


@dataclass
class CorpusConfig:
    """The ``[corpus]`` table of a preset: where passages come from and how they are chunked."""

    name: str = "hotpotqa"
    qa: QASource | None = DEFAULT_QA  # a QA file or hf:NAME[:CONFIG]; "" = none (the corpus comes from corpus_file)
    corpus_file: QASource | None = None
    embedder: str = "minilm"
    chunk_size: AtLeast0 = 200  # 0 = one passage per document
    chunk_overlap: AtLeast0 = 32  # below chunk_size
    limit: AtLeast1 | None = None  # rows read

    def __post_init__(self):
        self.qa = self.qa or None  # qa = "": none (a preset that builds its corpus from corpus_file)
        self.corpus_file = self.corpus_file or None  # "": none (--qa replaces the preset's corpus file)
        if self.chunk_size and self.chunk_overlap >= self.chunk_size:
            raise SettingError("chunk_overlap", f"must be below chunk_size ({self.chunk_size}), got "
                                                f"{self.chunk_overlap}")

