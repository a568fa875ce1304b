import json

import pytest

from agentrl.core.io import DataError, read_jsonl
from agentrl.data.corpus import (
    Chunker,
    Document,
    build_corpus,
    chunk_documents,
    context_paragraphs,
    documents_from_contexts,
    gold_titles,
    load_corpus_file,
    load_qa,
    normalize_row,
)
from conftest import HOTPOT


@pytest.fixture(scope="module")
def tokenizer():
    from agentrl.data.corpus import embedder_tokenizer

    return embedder_tokenizer("minilm")


def test_sample_contexts_pool_into_1987_unique_passages(hotpot_rows):
    docs = documents_from_contexts(hotpot_rows)
    assert len(docs) == 1987
    assert len({(d.title, d.text) for d in docs}) == 1987
    assert [d.doc_id for d in docs] == [str(i) for i in range(1987)]


def test_hotpot_sentences_join_without_doubled_spaces(hotpot_rows):
    title, text = context_paragraphs(hotpot_rows[0])[0]
    assert title == "Adam Collis"
    assert text.startswith("Adam Collis is an American filmmaker and actor. He attended the Duke University")
    assert "  " not in text


def test_original_hotpot_and_musique_layouts_are_read():
    hotpot = normalize_row({"_id": "a1", "question": "Q?", "answer": "yes",
                            "context": [["T1", ["One.", "Two."]], ["T2", ["Three."]]],
                            "supporting_facts": [["T1", 0], ["T2", 0], ["T1", 1]]})
    assert hotpot["id"] == "a1" and hotpot["golden_answers"] == ["yes"]
    assert context_paragraphs(hotpot) == [("T1", "One. Two."), ("T2", "Three.")]
    assert gold_titles(hotpot) == ["T1", "T2"]
    musique = normalize_row({"id": "m1", "question": "Q?", "answer": "x", "answer_aliases": ["y"],
                             "paragraphs": [{"idx": 0, "title": "A", "paragraph_text": "aa", "is_supporting": False},
                                            {"idx": 1, "title": "B", "paragraph_text": "bb", "is_supporting": True}]})
    assert musique["golden_answers"] == ["x", "y"]
    assert context_paragraphs(musique) == [("A", "aa"), ("B", "bb")]
    assert gold_titles(musique) == ["B"]


def test_chunker_returns_nothing_for_empty_text(tokenizer):
    assert Chunker(tokenizer, 8, 2).split("") == []
    assert Chunker(tokenizer, 8, 2).split("   \n ") == []


def test_chunker_keeps_short_text_whole(tokenizer):
    assert Chunker(tokenizer, 50, 10).split("A short passage.") == ["A short passage."]


@pytest.mark.parametrize("size,overlap", [(10, 10), (10, 12), (0, 0), (10, -1)])
def test_chunker_rejects_overlap_not_below_size(tokenizer, size, overlap):
    with pytest.raises(DataError):
        Chunker(tokenizer, size, overlap)


def test_chunks_overlap_by_the_requested_tokens_and_cover_the_text(tokenizer):
    words = [f"word{i}" for i in range(60)]
    text = " ".join(words)
    chunker = Chunker(tokenizer, 20, 5)
    chunks = chunker.split(text)
    assert len(chunks) > 2
    for c in chunks:
        assert c in text
        assert len(tokenizer(c, add_special_tokens=False)["input_ids"]) <= 20
        assert set(c.split()) <= set(words)  # edges snap to word starts: no word is cut
    assert chunks[0].startswith("word0") and chunks[-1].endswith("word59")
    for a, b in zip(chunks, chunks[1:], strict=False):
        shared = sorted(set(a.split()) & set(b.split()), key=words.index)
        assert a.endswith(shared[-1]) and b.startswith(shared[0])
        # the overlap is 5 tokens, widened to the start of the word it would otherwise cut (words are 2 tokens)
        assert 5 <= len(tokenizer(" ".join(shared), add_special_tokens=False)["input_ids"]) <= 6


def test_chunking_unicode_slices_the_original_characters(tokenizer):
    text = "Zürich – 東京 café naïve résumé 🚀 " * 30
    chunks = Chunker(tokenizer, 16, 4).split(text)
    assert len(chunks) > 1
    assert all(c in text for c in chunks)
    assert "東京" in chunks[0]


def test_chunk_ids_and_indices_count_up_per_document(tokenizer):
    docs = [Document("d1", "Long", " ".join(f"w{i}" for i in range(100))), Document("d2", "Short", "tiny"),
            Document("d3", "Empty", "")]
    passages = list(chunk_documents(docs, Chunker(tokenizer, 20, 4)))
    d1 = [p for p in passages if p["doc_id"] == "d1"]
    assert [p["chunk"] for p in d1] == list(range(len(d1))) and len(d1) > 1
    assert [p["id"] for p in d1] == [f"d1-{i}" for i in range(len(d1))]
    assert [p["id"] for p in passages if p["doc_id"] == "d2"] == ["d2-0"]
    assert not [p for p in passages if p["doc_id"] == "d3"]


def test_corpus_file_accepts_contents_and_title_text_layouts(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "1", "contents": '"Ed Wood"\nEd Wood was a filmmaker.'}) + "\n"
                    + json.dumps({"id": 2, "title": "Tim Burton", "text": "A director."}) + "\n")
    docs = load_corpus_file(path)
    assert docs == [Document("1", "Ed Wood", "Ed Wood was a filmmaker."), Document("2", "Tim Burton", "A director.")]


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    good = json.dumps({"id": "1", "question": "Q?", "golden_answers": ["a"]})
    path.write_text(good + "\n" + '{"id": "2", "question": \n')
    with pytest.raises(DataError, match=r"qa\.jsonl:2: invalid JSON"):
        load_qa(path)


def test_missing_field_names_the_field_and_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"id": "1", "question": "Q?", "golden_answers": ["a"]}) + "\n"
                    + json.dumps({"id": "2", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(DataError, match=r"qa\.jsonl:2: missing field 'question'"):
        load_qa(path)


def test_empty_question_set_and_duplicate_ids_are_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="no questions"):
        load_qa(empty)
    dup = tmp_path / "dup.jsonl"
    row = json.dumps({"id": "7", "question": "Q?", "golden_answers": ["a"]})
    dup.write_text(row + "\n" + row + "\n")
    with pytest.raises(DataError, match="duplicate id '7'"):
        load_qa(dup)


def test_build_corpus_writes_passages_and_manifest(tmp_path):
    out = tmp_path / "corpus" / "mini"
    counts = build_corpus(out, qa=HOTPOT, limit=5, chunk_size=64, chunk_overlap=8, progress=False)
    passages = read_jsonl(out / "corpus.jsonl")
    manifest = json.loads((out / "manifest.json").read_text())
    assert counts["passages"] == len(passages) > counts["documents"] > 0
    assert manifest["phase"] == "corpus" and manifest["name"] == "mini"
    assert manifest["counts"] == counts and manifest["config"]["chunk_size"] == 64
    assert len({p["id"] for p in passages}) == len(passages)


def test_failed_corpus_build_leaves_nothing_behind(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "contents": "x"}\n{oops\n')
    out = tmp_path / "corpus" / "broken"
    with pytest.raises(DataError, match="bad.jsonl:2"):
        build_corpus(out, corpus_file=bad, chunk_size=None, progress=False)
    assert not out.exists()
    assert not (tmp_path / "corpus").exists() or not any((tmp_path / "corpus").iterdir())
