"""The harness's fast paths give what the plain paths gave: msgspec lines and bodies read back as ``json`` ones,
the regex punctuation pass normalises as the HotpotQA scorer does, BM25's top-k over matching documents ranks as
bm25s does, and the memory-mapped index arrays stay mapped."""

import gc
import json
from pathlib import Path

import numpy as np
import pytest

from agentrl.core.aio import frozen_heap
from agentrl.core.io import dumps, encode_line, loads
from agentrl.core.metrics import normalize_answer
from agentrl.data.corpus import documents_from_contexts
from agentrl.retrieval.bm25 import BM25Config, BM25Index, tokenize, top_positive
from agentrl.rollout.endpoint import request_body
from test_metrics import official_normalize_answer


def test_lines_read_back_as_the_json_module_wrote_them():
    rec = {"text": "café — ✓ 東京", "ints": [0, -1, 2**63 - 1, 2**70, -(2**80)], "float": 0.1, "none": None,
           "bool": True, "tuple": (1, "a"), 7: "an int key", 2.5: "a float key", None: "a None key",
           "np32": np.float32(0.1), "np_array": np.arange(3),
           "path": Path("runs/eval"), "nested": {"deep": [[{"x": 1.5e-7}]]}}
    line = encode_line(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == json.loads(dumps(rec))
    assert json.loads(line)["np32"] == float(np.float32(0.1))  # numpy values through tolist(), as before


def test_what_msgspec_refuses_is_written_or_refused_as_before():
    assert json.loads(encode_line({"v": "a\ud800b", True: 1}).decode("utf-8")) == {"v": "a\ufffdb", "true": 1}
    with pytest.raises(TypeError, match="keys must be"):  # json.dumps's own error
        encode_line({("tuple", "key"): 1})
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        encode_line({"v": object()})


def test_non_finite_floats_become_null_so_any_json_reader_accepts_the_line():
    assert json.loads(encode_line({"x": float("nan"), "y": float("inf")})) == {"x": None, "y": None}


def test_loads_returns_and_raises_what_json_loads_does():
    assert loads(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}
    assert str(loads(b'{"x": NaN}')["x"]) == "nan" and loads(b"[123456789012345678901234567890]") == [
        123456789012345678901234567890]
    assert loads('"\\ud800"') == "\ud800"
    for bad in (b'{"a": }', b'{"a": 1', b"\xff\xfe"):
        try:
            json.loads(bad)
        except ValueError as exc:
            expected = exc
        with pytest.raises(type(expected)) as got:
            loads(bad)
        assert str(got.value) == str(expected)
    with pytest.raises(RecursionError):
        loads(b"[" * 100_000 + b"]" * 100_000)


def test_request_bodies_are_utf8_json_and_escape_a_lone_surrogate():
    request = {"model": "m", "messages": [{"role": "user", "content": "Qui a réalisé « Ed Wood » ?"}],
               "temperature": 0.0, "max_tokens": 16}
    body = request_body(request)
    assert json.loads(body) == json.loads(json.dumps(request))
    broken = request_body({"messages": [{"content": "a\ud800b"}]})
    assert b"\\ud800" in broken and json.loads(broken.decode("utf-8"))["messages"][0]["content"] == "a\ud800b"


TRICKY = ["the—a film", "«The» End", "L’Avventura (the film)", "a_b the_c", "\x01the\x01", "Ünïcödé café",
          "The   1,000   days", "an—an", "theatre a thé", "x-the-y", "“A” and ‘an’", "ⅷ the Ⅸ", "a\u00a0the\u2003b"]


def test_normalisation_equals_the_hotpotqa_scorer_on_tricky_text_and_every_sample_passage(hotpot_rows):
    texts = TRICKY + [d.text for d in documents_from_contexts(hotpot_rows)]
    assert len(texts) > 1000
    for text in texts:
        assert normalize_answer(text) == official_normalize_answer(text), text


def test_top_positive_keeps_matching_documents_best_first_and_ties_by_index():
    scores = np.array([0, 2, 1, 2, 0, 3, 2, -1], dtype=np.float32)
    ids, values = top_positive(scores, 3)
    assert ids.tolist() == [5, 1, 3] and values.tolist() == [3, 2, 2]
    ids, values = top_positive(scores, 10)
    assert ids.tolist() == [5, 1, 3, 6, 2] and values.tolist() == [3, 2, 2, 2, 1]
    assert top_positive(np.zeros(5, dtype=np.float32), 3)[0].tolist() == []


def test_bm25_search_ranks_as_bm25s_retrieve_does(hotpot_rows):
    passages = [d.text for d in documents_from_contexts(hotpot_rows)]
    index = BM25Index.build(passages, BM25Config(backend="numpy"))
    assert index.retriever.backend == "numpy"  # the path that selects among matching documents itself
    queries = tokenize([row["question"] for row in hotpot_rows], index.cfg)
    for k in (3, 20):
        ids, scores = index.search_tokens(queries, k)
        res = index.retriever.retrieve(queries, k=k, show_progress=False, n_threads=0)
        for mine, my_scores, theirs, their_scores in zip(ids, scores, res.documents, res.scores, strict=True):
            assert np.allclose(my_scores, np.where(their_scores > 0, their_scores, 0))
            # the same documents above the last score taken (bm25s cuts a tie there arbitrarily; the sample holds
            # the same paragraph under several questions, so ties are common)
            last = their_scores[their_scores > 0].min(initial=np.inf)
            assert set(mine[my_scores > last]) == set(theirs[their_scores > last])


def test_a_loaded_bm25_index_reads_its_mapped_files_without_the_memmap_subclass(small_retriever):
    arrays = [v for v in small_retriever.bm25.retriever.scores.values() if isinstance(v, np.ndarray)]
    assert arrays
    for arr in arrays:
        assert type(arr) is np.ndarray and not arr.flags.owndata  # a view of the mapping, not a copy
        assert isinstance(arr.base, np.memmap)


def test_the_heap_is_frozen_inside_the_block_and_a_callers_own_freeze_is_left_alone():
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        with frozen_heap():  # a second run while one is going
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        made_after = [[] for _ in range(10_000)]  # a second freeze would move these into the permanent generation
        with frozen_heap():
            pass
        # the count only falls when frozen objects are freed (other threads of the test process free some)
        assert 0 < gc.get_freeze_count() <= before
        assert made_after
    finally:
        gc.unfreeze()
