"""Every evidence layout the seed's data uses, gold answers given as bare strings, and clear errors otherwise."""

import json

import pytest

from agentrl.cli import main
from agentrl.core.io import DataError
from agentrl.core.metrics import answer_metrics, gold_list
from agentrl.data.corpus import context_paragraphs, evidence_layout, gold_titles, load_qa, normalize_row
from agentrl.envs.search.env import SearchEnv, search_plan
from agentrl.rollout.rewards import answer_em
from conftest import HOTPOT

# one hand-made row per layout; each holds two paragraphs, "B" is the (only) supporting one
LAYOUT_ROWS = {
    "hotpotqa-flashrag": {"id": "h", "question": "Q?", "golden_answers": ["x"], "metadata": {
        "context": {"title": ["A", "B"], "sentences": [["aa."], ["bb.", "b2."]]},
        "supporting_facts": {"title": ["B"], "sent_id": [0]}}},
    "hotpotqa/2wiki": {"_id": "o", "question": "Q?", "answer": "x",
                       "context": [["A", ["aa."]], ["B", ["bb.", "b2."]]], "supporting_facts": [["B", 0]]},
    "2wiki-flashrag": {"id": "w", "question": "Q?", "golden_answers": ["x"], "metadata": {
        "context": {"title": ["A", "B"], "content": [["aa."], ["bb.", "b2."]]},
        "supporting_facts": {"title": ["B"], "sent_id": [1]}}},
    "musique": {"id": "m", "question": "Q?", "answer": "x", "answer_aliases": [], "paragraphs": [
        {"idx": 0, "title": "A", "paragraph_text": "aa.", "is_supporting": False},
        {"idx": 1, "title": "B", "paragraph_text": "bb. b2.", "is_supporting": True}]},
    "musique-flashrag": {"id": "f", "question": "Q?", "golden_answers": ["x"], "metadata": {
        "question_decomposition": [
            {"id": 1, "question": "q1", "answer": "y", "paragraph_support_idx": 4,
             "support_paragraph": {"idx": 4, "title": "B", "paragraph_text": "bb. b2.", "is_supporting": True}},
            {"id": 2, "question": "q2 #1", "answer": "x", "paragraph_support_idx": 7,
             "support_paragraph": {"idx": 7, "title": "A", "paragraph_text": "aa.", "is_supporting": False}}]}},
}


@pytest.mark.parametrize("layout", list(LAYOUT_ROWS))
def test_each_layout_is_detected_and_yields_its_paragraphs_and_gold(layout):
    row = normalize_row(LAYOUT_ROWS[layout], "rows.jsonl:1")
    assert evidence_layout(row) == layout
    assert sorted(context_paragraphs(row)) == [("A", "aa."), ("B", "bb. b2.")]
    assert gold_titles(row) == ["B"]


def test_musique_decomposition_without_a_supporting_flag_counts_as_gold():
    row = normalize_row({"id": "f", "question": "Q?", "golden_answers": ["x"], "metadata": {
        "question_decomposition": [{"support_paragraph": {"title": "T", "paragraph_text": "tt"}}]}})
    assert gold_titles(row) == ["T"] and context_paragraphs(row) == [("T", "tt")]


def test_a_file_mixing_layouts_is_read_row_by_row(tmp_path):
    qa = tmp_path / "mixed.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in LAYOUT_ROWS.values()))
    rows = load_qa(qa)
    assert [evidence_layout(r) for r in rows] == list(LAYOUT_ROWS)


def _musique_flashrag_rows(n: int) -> list[dict]:
    """Real HotpotQA questions rewritten into FlashRAG's MuSiQue layout: only the supporting paragraphs, each in
    a question_decomposition step (no context, no paragraphs)."""
    out = []
    for row in load_qa(HOTPOT):
        gold = set(gold_titles(row))
        if len(out) == n:
            break
        if not gold <= {t for t, _ in context_paragraphs(row)}:
            continue  # this sample's contexts miss some gold paragraphs; MuSiQue's decomposition never does
        steps = [{"id": i, "question": f"step {i}", "answer": "",
                  "support_paragraph": {"idx": i, "title": t, "paragraph_text": x, "is_supporting": True}}
                 for i, (t, x) in enumerate(context_paragraphs(row)) if t in gold]
        out.append({"id": row["id"], "question": row["question"], "golden_answers": row["golden_answers"],
                    "metadata": {"type": row["metadata"].get("type"), "question_decomposition": steps}})
    return out


def test_musique_flashrag_rows_go_through_corpus_index_and_retrieval_eval_unconverted(tmp_path, capsys):
    qa = tmp_path / "musique_flashrag.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in _musique_flashrag_rows(12)))
    corpus = tmp_path / "corpus"
    assert main(["corpus", "--qa", str(qa), "--out", str(corpus)]) == 0
    assert sum(1 for _ in (corpus / "corpus.jsonl").open()) >= 20
    assert main(["index", "--corpus", str(corpus)]) == 0
    out = tmp_path / "eval"
    assert main(["retrieval-eval", "--index", str(corpus / "index"), "--qa", str(qa), "--out", str(out),
                 "--no-chart"]) == 0
    report = json.loads((out / "retrieval_eval.json").read_text())
    assert report["summary"]["questions"] == 12 and report["summary"]["gold_present_share"] == 1.0
    assert report["methods"]["hybrid"]["recall@10"] > 0.5


def test_rows_without_evidence_name_the_file_the_row_and_the_layouts(tmp_path, capsys):
    qa = tmp_path / "bare.jsonl"
    qa.write_text(json.dumps({"id": "q1", "question": "Q?", "golden_answers": ["a"],
                              "metadata": {"evidence": [{"title": "T", "text": "t"}]}}) + "\n")
    assert main(["corpus", "--qa", str(qa), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert str(qa) in err and "row 1 (id 'q1')" in err and "question_decomposition" in err and "paragraphs" in err
    assert not (tmp_path / "c").exists()


def test_rows_in_an_unknown_layout_inside_a_valid_file_are_counted_and_named_in_a_warning(tmp_path, small_index):
    from agentrl.data.corpus import build_corpus
    from agentrl.retrieval import Retriever
    from agentrl.retrieval.evaluate import evaluate_retrieval

    unknown = {"question": "Q?", "golden_answers": ["a"], "metadata": {"evidence": [{"title": "T", "text": "t"}]}}
    rows = [LAYOUT_ROWS["musique"], {**unknown, "id": "u1"}, LAYOUT_ROWS["hotpotqa-flashrag"], {**unknown, "id": "u2"}]
    qa = tmp_path / "partly.jsonl"
    qa.write_text(json.dumps(rows[0]) + "\n\n" + "".join(json.dumps(r) + "\n" for r in rows[1:]))  # a blank line 2
    with pytest.warns(UserWarning) as caught:
        counts = build_corpus(tmp_path / "c", qa=qa, chunk_size=None, progress=False)
    assert counts["documents"] == 2  # A and B (the same in both known rows), nothing from the others
    (message,) = [str(w.message) for w in caught if "skipped" in str(w.message)]
    assert message.startswith(f"{qa}: 2 of 4 rows have no context paragraphs in any known layout and were skipped")
    assert "the first is line 3 (id 'u1')" in message and "question_decomposition" in message
    with pytest.warns(UserWarning, match=r"2 of 4 rows have no gold evidence .* the first is line 3 \(id 'u1'\)"):
        report = evaluate_retrieval(Retriever.load(small_index), load_qa(qa), methods=["bm25"], source=str(qa))
    assert report["summary"]["questions_without_gold"] == 2


def test_retrieval_eval_without_gold_evidence_names_the_file_and_row(small_index, tmp_path, capsys):
    qa = tmp_path / "nogold.jsonl"
    qa.write_text(json.dumps({"id": "q9", "question": "Who?", "golden_answers": ["a"]}) + "\n")
    assert main(["retrieval-eval", "--index", str(small_index), "--qa", str(qa), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "no question carries gold evidence" in err and str(qa) in err and "row 1 (id 'q9')" in err


# ----------------------------------------------------------------------------- gold answers


def test_a_bare_string_gold_is_one_answer_not_its_characters():
    assert answer_metrics("Paris", "Paris")["em"] == 1.0
    assert answer_metrics("P", "Paris")["em"] == 0.0
    assert gold_list("Paris") == ["Paris"] and gold_list(None) == []
    assert answer_em(None, [[{"role": "assistant", "content": "<answer>Paris</answer>"}]],
                     golden_answers=["Paris"]) == [1.0]


def test_search_env_and_oracle_take_a_bare_string_gold_as_one_answer():
    env = SearchEnv()
    env.reset(question="Q?", golden_answers="Paris")
    assert env.golden_answers == ["Paris"]
    plan = search_plan({"question": "Q?", "golden_answers": "Paris", "metadata": {}})
    assert plan[-1].content == "<answer>Paris</answer>"


@pytest.mark.parametrize("gold,bad", [([["Paris"]], "list"), ([None], "NoneType"), ([1998], "int"),
                                      ({"a": 1}, "dict"), (3.5, "float")])
def test_nested_or_non_string_golds_are_refused_at_load_time_with_file_and_line(tmp_path, gold, bad):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "1", "question": "Q?", "golden_answers": ["ok"]}) + "\n"
                  + json.dumps({"id": "2", "question": "Q?", "golden_answers": gold}) + "\n")
    with pytest.raises(DataError, match=rf"qa.jsonl:2: field 'golden_answers'.*{bad}"):
        load_qa(qa)
    with pytest.raises(ValueError, match=bad):
        answer_metrics("x", gold if isinstance(gold, list) else gold)
