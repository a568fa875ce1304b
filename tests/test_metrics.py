"""Answer metrics must agree exactly with the HotpotQA official scorer and FlashRAG on the same predictions."""

import random
import re
import string
from collections import Counter

import pytest

from agentrl.core.metrics import aggregate, answer_metrics, normalize_answer


# --- The HotpotQA official scorer (hotpot_evaluate_v1.py, Yang et al. 2018), as published. -----------------
def official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_f1_score(prediction, ground_truth):
    normalized_prediction = official_normalize_answer(prediction)
    normalized_ground_truth = official_normalize_answer(ground_truth)

    ZERO_METRIC = (0, 0, 0)

    if normalized_prediction in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC
    if normalized_ground_truth in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC

    prediction_tokens = normalized_prediction.split()
    ground_truth_tokens = normalized_ground_truth.split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return ZERO_METRIC
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1, precision, recall


def official_exact_match_score(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)
# ------------------------------------------------------------------------------------------------------------


CASES = [
    ("Tim Burton", "Tim Burton"), ("tim burton.", "Tim Burton"), ("The Tim Burton", "Tim Burton"),
    ("It was directed by Tim Burton.", "Tim Burton"), ("yes", "yes"), ("Yes.", "yes"), ("yes", "no"),
    ("no", "yes it is"), ("yes it is", "yes"), ("noanswer", "noanswer"), ("", "Tim Burton"),
    ("a an the", "the"), ("1,000", "1000"), ("  multiple   spaces  ", "multiple spaces"),
    ("Ed Wood (film)", "Ed Wood"), ("the the the", "the"), ("Ünïcödé café", "unicode cafe"),
    ("Chief of Protocol", "Chief of Protocol of the United States"), ("apple apple pie", "apple pie"),
]


@pytest.mark.parametrize("prediction,gold", CASES)
def test_normalisation_and_f1_equal_the_hotpotqa_scorer(prediction, gold):
    assert normalize_answer(prediction) == official_normalize_answer(prediction)
    m = answer_metrics(prediction, [gold])
    f1, p, r = official_f1_score(prediction, gold)
    assert (m["f1"], m["precision"], m["recall"]) == (f1, p, r)
    assert m["em"] == float(official_exact_match_score(prediction, gold))


def test_random_predictions_agree_with_the_scorer_on_sample_answers(hotpot_rows):
    rng = random.Random(0)
    golds = [g for r in hotpot_rows for g in r["golden_answers"]]
    words = " ".join(golds).split() + ["the", "a", ",", "yes", "no", "Inc.", "(film)"]
    for _ in range(2000):
        gold = rng.choice(golds)
        pred = " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        if rng.random() < 0.3:
            pred = gold + rng.choice(["", ".", " (film)", " Jr.", ", USA"])
        m = answer_metrics(pred, [gold])
        assert (m["f1"], m["precision"], m["recall"]) == official_f1_score(pred, gold)
        assert m["em"] == float(official_exact_match_score(pred, gold))


def test_metrics_take_the_max_over_gold_answers_separately():
    m = answer_metrics("New York City", ["NYC", "New York", "New York City Hall"])
    assert m["em"] == 0.0
    assert m["recall"] == 1.0  # from "New York"
    assert m["precision"] == 1.0  # from "New York City Hall"
    assert m["f1"] == pytest.approx(max(official_f1_score("New York City", g)[0] for g in
                                        ["NYC", "New York", "New York City Hall"]))


def test_acc_is_flashrag_substring_containment_but_yes_no_only_exact():
    assert answer_metrics("It was directed by Tim Burton.", ["Tim Burton"])["acc"] == 1.0
    assert answer_metrics("Burton", ["Tim Burton"])["acc"] == 0.0
    assert answer_metrics("yes", ["yes"])["acc"] == 1.0
    assert answer_metrics("yes, they were both American", ["yes"])["acc"] == 0.0
    assert answer_metrics("no", ["no"])["acc"] == 1.0
    assert answer_metrics("noanswer", ["Tim Burton"])["acc"] == 0.0
    assert answer_metrics(None, ["x"]) == {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0, "acc": 0.0}


def test_aggregate_breaks_down_by_question_type():
    recs = [{"metrics": {"f1": 1.0, "em": 1.0}, "metadata": {"type": "bridge"}},
            {"metrics": {"f1": 0.5, "em": 0.0}, "metadata": {"type": "bridge"}},
            {"metrics": {"f1": 0.0, "em": 0.0}, "metadata": {"type": "comparison"}, "error": "boom"}]
    agg = aggregate(recs)
    assert agg["n"] == 3 and agg["errors"] == 1
    assert agg["overall"]["f1"] == 0.5
    assert agg["by_type"]["bridge"] == {"n": 2, "em": 0.5, "f1": 0.75}
    assert agg["by_type"]["comparison"]["f1"] == 0.0


def test_tool_call_quality_counts_format_errors_but_not_tool_failures():
    from agentrl.core.metrics import tool_call_quality

    def traj(*errors):
        msgs = [{"role": "tool", "content": "x", **({"error": e} if e else {})} for e in errors]
        return {"messages": [{"role": "user", "content": "q"}, *msgs]}

    q = tool_call_quality([traj(None, "invalid_arguments"), traj("unknown_tool"), traj("tool_exception"), traj()])
    assert q == {"episodes_with_wellformed_call": 0.5, "wellformed_call_share": 0.5, "episodes_with_call": 0.75,
                 "mean_calls": 1.0}
