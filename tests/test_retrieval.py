import json
import re
import shutil

import numpy as np
import pytest

from agentrl.core.io import DataError
from agentrl.retrieval import BM25Config, BM25Index, Retriever, normalized, rrf
from agentrl.retrieval.bm25 import tokenize
from agentrl.retrieval.evaluate import evaluate_retrieval, question_metrics


def test_query_and_corpus_get_the_same_stemming():
    cfg = BM25Config()
    assert tokenize(["The directors running studios"], cfg) == tokenize(["director run studio"], cfg)
    index = BM25Index.build(["Studios run by directors", "A cat sleeps", "Dogs bark loudly"], cfg)
    docs, scores = index.search(["directing the running studio"], 3)
    assert docs[0][0] == 0 and scores[0][0] > 0


def test_unmatched_query_scores_zero_and_yields_no_bm25_hit(small_retriever):
    assert small_retriever.search("qwxzzv plokjh", 5, "bm25") == []


def test_rrf_matches_hand_computation():
    fused = rrf([[7, 3], [3, 9]], k=60)
    assert [d for d, _ in fused] == [3, 7, 9]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1][1] == pytest.approx(1 / 61)
    assert fused[2][1] == pytest.approx(1 / 62)


def test_rrf_ties_break_by_best_rank_then_position_whatever_the_input_order():
    a = rrf([[5, 2], [2, 5]], k=60)
    b = rrf([[2, 5], [5, 2]], k=60)
    assert a == b and [d for d, _ in a] == [2, 5]
    # docs 4 and 8 tie in score and best rank; the lower position wins every time
    for _ in range(20):
        assert [d for d, _ in rrf([[8], [4]], k=60)] == [4, 8]


def test_zscore_fusion_matches_hand_computation():
    # bm25 scores 3, 1 -> z = +1, -1 ; dense 0.9 (doc 2), 0.5 (doc 3), 0.1 (doc 1) -> z = 1.2247, 0, -1.2247
    fused = dict(normalized([[(1, 3.0), (2, 1.0)], [(2, 0.9), (3, 0.5), (1, 0.1)]], norm="zscore"))
    z = 1.5 ** 0.5
    assert fused[1] == pytest.approx(1 - z)
    assert fused[2] == pytest.approx(-1 + z)
    assert fused[3] == pytest.approx(-1 + 0.0)  # missing from bm25 -> that list's minimum
    mm = dict(normalized([[(1, 3.0), (2, 1.0)], [(2, 0.9), (3, 0.5), (1, 0.1)]], norm="minmax"))
    assert mm == pytest.approx({1: 1.0, 2: 1.0, 3: 0.5})


def test_hybrid_search_is_deterministic(small_retriever):
    q = "Which American film director made Ed Wood?"
    first = [(h.id, h.score) for h in small_retriever.search(q, 10)]
    for _ in range(3):
        assert [(h.id, h.score) for h in small_retriever.search(q, 10)] == first


@pytest.mark.slow
def test_save_load_round_trip_gives_identical_rankings(small_index, tmp_path, hotpot_rows, embedder):
    from agentrl.retrieval import DenseIndex
    from agentrl.retrieval.index import passage_text

    loaded = Retriever.load(small_index)
    texts = [passage_text(p) for p in loaded.store]
    questions = [r["question"] for r in hotpot_rows[:24]]
    # in memory, before anything is saved: the same builders the index directory was made with
    bm25 = BM25Index.build(texts, loaded.cfg.bm25)
    dense = DenseIndex.build(embedder.encode_passages(texts), loaded.cfg.dense)
    docs, scores = bm25.search(questions, 10)
    disk_docs, disk_scores = loaded.bm25.search(questions, 10)
    assert np.array_equal(docs, disk_docs) and np.allclose(scores, disk_scores)
    qvecs = embedder.encode_queries(questions)
    idx, dscores = dense.search(qvecs, 10)
    disk_idx, disk_dscores = loaded.dense.search(qvecs, 10)
    assert np.array_equal(idx, disk_idx) and np.allclose(dscores, disk_dscores)
    # and a copied directory loads to the very same fused rankings
    copy = tmp_path / "copy"
    shutil.copytree(small_index, copy)
    b = Retriever.load(copy)
    for method in ("bm25", "dense", "hybrid"):
        ra = [[(h.id, h.score) for h in hits] for hits in loaded.search_batch(questions, 10, method)]
        rb = [[(h.id, h.score) for h in hits] for hits in b.search_batch(questions, 10, method)]
        assert ra == rb


def test_search_returns_passages_with_titles_and_respects_top_k(small_retriever):
    hits = small_retriever.search("Scott Derrickson", 3)
    assert len(hits) == 3
    assert hits[0].title and hits[0].text and hits[0].id
    assert any("Derrickson" in h.text for h in hits)


@pytest.mark.parametrize("query,top_k,match", [("", 5, "non-empty"), ("   ", 5, "non-empty"),
                                               ("ok", 0, "top_k"), ("ok", -3, "top_k")])
def test_bad_search_arguments_raise_clear_errors(small_retriever, query, top_k, match):
    with pytest.raises(DataError, match=match):
        small_retriever.search(query, top_k)


def test_missing_index_files_are_reported_by_name(small_index, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(small_index, broken)
    (broken / "dense.faiss").unlink()
    with pytest.raises(DataError, match="dense.faiss"):
        Retriever.load(broken)
    with pytest.raises(DataError, match="not found"):
        Retriever.load(tmp_path / "nowhere")


def test_index_files_disagreeing_with_the_manifest_are_rejected(small_index, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(small_index, broken)
    manifest = json.loads((broken / "index.json").read_text())
    manifest["n_passages"] += 1
    (broken / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="disagree"):
        Retriever.load(broken)


def test_build_time_settings_cannot_be_overridden_at_load(small_index):
    with pytest.raises(DataError, match="rebuild"):
        Retriever.load(small_index, overrides={"bm25": {"k1": 2.0}})
    r = Retriever.load(small_index, overrides={"fusion": "rrf", "depth": 20})
    assert r.cfg.fusion == "rrf" and r.cfg.depth == 20


def test_retrieval_metrics_on_a_hand_checkable_ranking():
    ranked = ["A", "X", "A", "B", "Y"]  # A's second chunk must not be credited twice
    m = question_metrics(ranked, {"A", "B", "C"}, ks=(1, 2, 5))
    assert m["recall@1"] == pytest.approx(1 / 3)
    assert m["recall@5"] == pytest.approx(2 / 3)
    assert m["all_gold@5"] == 0.0
    assert m["mrr@10"] == 1.0
    dcg = 1 / np.log2(2) + 1 / np.log2(5)
    ideal = 1 / np.log2(2) + 1 / np.log2(3) + 1 / np.log2(4)
    assert m["ndcg@10"] == pytest.approx(dcg / ideal)
    assert question_metrics(["Z", "B"], {"B"}, ks=(1,))["mrr@10"] == 0.5


def test_evaluation_separates_gold_missing_from_the_corpus(small_retriever, hotpot_rows):
    report = evaluate_retrieval(small_retriever, hotpot_rows[:24], ks=(5, 10))
    s = report["summary"]
    assert s["questions"] == 24 and s["gold_titles"] == 48
    assert 0 < s["gold_absent_from_corpus"] < 48
    for m in report["methods"].values():
        assert m["recall@10_reachable"] >= m["recall@10"]
    assert report["methods"]["hybrid"]["recall@10_reachable"] > 0.7


def test_ivfpq_nprobe_and_hnsw_ef_search_can_be_changed_at_load_time(tmp_path):
    from dataclasses import replace

    from agentrl.retrieval import DenseConfig, DenseIndex

    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(4000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ivf = DenseConfig(index_type="ivfpq", nprobe=4)
    DenseIndex.build(vecs, ivf).save(tmp_path / "ivf.faiss")
    loaded = DenseIndex.load(tmp_path / "ivf.faiss", replace(ivf, nprobe=9))
    import faiss

    assert faiss.extract_index_ivf(loaded.index).nprobe == 9
    hnsw = DenseConfig(index_type="hnsw", ef_search=16)
    DenseIndex.build(vecs[:500], hnsw).save(tmp_path / "hnsw.faiss")
    assert DenseIndex.load(tmp_path / "hnsw.faiss", replace(hnsw, ef_search=200)).index.hnsw.efSearch == 200


PARIS = [  # one long document in three chunks, two documents sharing a title, and others
    {"id": "0-0", "doc_id": "0", "chunk": 0, "title": "Paris", "text": "Paris is the capital of France on the Seine."},
    {"id": "0-1", "doc_id": "0", "chunk": 1, "title": "Paris", "text": "Paris hosts the Louvre, the capital's museum."},
    {"id": "0-2", "doc_id": "0", "chunk": 2, "title": "Paris", "text": "The capital Paris has twenty arrondissements."},
    {"id": "1-0", "doc_id": "1", "chunk": 0, "title": "Paris", "text": "Paris, the capital of France, since 508."},
    {"id": "2-0", "doc_id": "2", "chunk": 0, "title": "Lyon", "text": "Lyon is a French city, not the capital."},
    {"id": "3-0", "doc_id": "3", "chunk": 0, "title": "France", "text": "France's capital is Paris; its largest city."},
    {"id": "4-0", "doc_id": "4", "chunk": 0, "title": "Seine", "text": "The Seine flows through the French capital."},
    {"id": "5-0", "doc_id": "5", "chunk": 0, "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "6-0", "doc_id": "6", "chunk": 0, "title": "Marseille", "text": "Marseille is a port city in France."},
]


def _index(passages, directory, embedder):
    from agentrl.retrieval import build_index

    return build_index(passages, directory / "index", embedder=embedder, progress=False)


@pytest.fixture(scope="module")
def paris_index(tmp_path_factory, embedder):
    return _index(PARIS, tmp_path_factory.mktemp("paris"), embedder)


@pytest.mark.parametrize("method", ["bm25", "dense", "hybrid"])
def test_search_returns_distinct_documents_by_their_best_chunk(paris_index, method):
    r = Retriever.load(paris_index)
    raw = r.search_batch(["capital of France Paris"], 5, method, distinct=False)[0]
    assert len({h.title for h in raw}) < 5  # the situation: one title fills several slots
    hits = r.search("capital of France Paris", 5, method)  # distinct by default
    assert len(hits) == 5 and len({h.title.casefold() for h in hits}) == 5
    best_paris = next(h for h in raw if h.title == "Paris")
    assert next(h for h in hits if h.title == "Paris").id == best_paris.id  # the document's best chunk
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_fewer_documents_than_top_k_returns_them_all_once(paris_index):
    hits = Retriever.load(paris_index).search("capital", 20, "bm25")
    assert len(hits) == len({h.title for h in hits}) == 5  # six titles; Marseille has no query term


def test_raw_chunks_can_be_chosen_at_load_time_and_from_the_cli(paris_index, capsys):
    from agentrl.cli import main

    r = Retriever.load(paris_index, overrides={"distinct": False})
    assert [h.title for h in r.search("Paris capital", 4, "bm25")].count("Paris") >= 3
    paris_ids = {"0-0", "0-1", "0-2", "1-0"}

    def printed_ids():
        return re.findall(r"│ (\d+-\d+)\s", capsys.readouterr().out)

    assert main(["search", "--index", str(paris_index), "--method", "bm25", "-k", "4", "Paris capital"]) == 0
    assert len(paris_ids.intersection(printed_ids())) == 1
    assert main(["search", "--index", str(paris_index), "--method", "bm25", "-k", "4", "--raw-chunks",
                 "Paris capital"]) == 0
    assert len(paris_ids.intersection(printed_ids())) >= 3


def test_mcp_tool_returns_distinct_documents(paris_index):
    import asyncio

    from mcp import Client

    from agentrl.retrieval.mcp_server import build_server

    server = build_server(Retriever.load(paris_index), method="bm25")

    async def main():
        async with Client(server) as client:
            r = await client.call_tool("search", {"query": "capital of France Paris", "top_k": 5})
            assert not r.is_error
            return [p["title"] for p in r.structured_content["result"]]

    titles = asyncio.run(main())
    assert len(titles) == len(set(titles)) == 5


# one document cut into 60 chunks that all match the query better than any other document
LONG_DOC = [{"id": f"0-{c}", "doc_id": "0", "chunk": c, "title": "Paris",
             "text": f"Paris is the capital of France. Paris capital fact number {c}."} for c in range(60)] + [
    {"id": f"{d}-0", "doc_id": str(d), "chunk": 0, "title": t, "text": x} for d, (t, x) in enumerate([
        ("Lyon", "Lyon is a city of France, not its capital."), ("Berlin", "Berlin is the capital of Germany."),
        ("Seine", "The Seine flows through the capital of France."), ("Rome", "Rome is the capital of Italy."),
        ("Marseille", "Marseille is a port of France."), ("Madrid", "Madrid is the capital of Spain.")], start=1)]


def test_a_document_with_many_chunks_still_leaves_top_k_distinct_documents_for_every_method(tmp_path, embedder):
    r = Retriever.load(_index(LONG_DOC, tmp_path, embedder))
    query = "Paris capital of France"
    for method in ("bm25", "dense", "hybrid"):
        first_fetch = r.rank_batch([query], max(4 * 5, 5 + 20), method, distinct=False)[0]
        assert {r.doc_key(i) for i, _ in first_fetch} == {"paris"}, method  # the situation: one document
        hits = r.search(query, 5, method)
        assert len(hits) == len({h.title for h in hits}) == 5 and hits[0].title == "Paris", method
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len(r.search(query, 7, method)) == 7  # every document of the corpus, once each
        assert len(r.search(query, 50, method)) == 7


# forty documents whose passages score exactly alike for BM25 (same text, one-token titles that are no query term),
# written in shuffled order: a tie wider than the first fetch
TIED = [{"id": f"p{n}", "doc_id": f"d{n}", "chunk": 0, "title": f"T{n:02d}",
         "text": "The harbour lighthouse guides ships at night."} for n in np.random.default_rng(3).permutation(40)]


def test_equal_scores_are_ordered_by_title_then_passage_id_over_the_whole_tie(tmp_path, embedder):
    extra = [{"id": "z1", "doc_id": "z", "chunk": 1, "title": "T00", "text": TIED[0]["text"]},  # a second T00 chunk
             {"id": "q0", "doc_id": "q", "chunk": 0, "title": "Quay", "text": "The old quay and its lighthouse."}]
    r = Retriever.load(_index(TIED + extra, tmp_path, embedder))
    raw = r.rank_batch(["harbour lighthouse quay"], 45, "bm25", distinct=False)[0]
    tied = [s for _, s in raw if s == raw[1][1]]
    assert r.store[raw[0][0]]["id"] == "q0" and len(tied) == 41 and raw[0][1] > tied[0]  # Quay, then 41 tied chunks
    for k in (3, 30):
        hits = r.search("harbour lighthouse quay", k, "bm25")
        expected = ["Quay"] + [f"T{n:02d}" for n in range(k - 1)]
        assert [h.title for h in hits] == expected
        assert hits[1].id == "p0"  # T00's two tied chunks: the lower passage id ("p0" < "z1")
    again = Retriever.load(r.directory)
    assert [h.id for h in again.search("harbour lighthouse quay", 3, "bm25")] == ["q0", "p0", "p1"]


def test_the_query_vector_cache_is_a_lru_bounded_by_entries_and_by_bytes(small_retriever):
    from agentrl.retrieval.cache import QueryVectorCache

    vecs = np.arange(40, dtype=np.float32).reshape(10, 4)
    cache = QueryVectorCache(max_entries=3, max_bytes=2**20)
    cache.put_many([f"q{i}" for i in range(3)], vecs[:3])
    assert set(cache.get_many(["q0"])) == {"q0"}  # q0 is now the most recently used
    cache.put_many(["q3", "q4"], vecs[3:5])
    assert sorted(cache.get_many([f"q{i}" for i in range(5)])) == ["q0", "q3", "q4"] and len(cache) == 3
    assert np.array_equal(cache.get_many(["q4"])["q4"], vecs[4]) and cache.nbytes == 3 * 4 * 4
    by_bytes = QueryVectorCache(max_entries=1_000, max_bytes=5 * 4 * 4)  # room for five 4-d vectors
    by_bytes.put_many([f"q{i}" for i in range(10)], vecs)
    assert len(by_bytes) == 5 and by_bytes.nbytes == 80 and sorted(by_bytes.get_many(["q0", "q9"])) == ["q9"]
    long_query = "x" * 1_999  # a long query's key is a 16-byte digest, not its text
    assert len(QueryVectorCache.key(long_query)) == 16
    r = small_retriever
    first = r.query_vectors(["Ed Wood film", long_query])
    assert {"Ed Wood film", long_query} <= set(r.query_cache.get_many(["Ed Wood film", long_query]))
    assert np.array_equal(r.query_vectors([long_query, "Ed Wood film"]), first[::-1])
