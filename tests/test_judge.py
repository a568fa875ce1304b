"""The LLM judge against a real scripted endpoint process: verdicts, retries, fallback and cache."""

import asyncio

import pytest

from agentrl.judge import JudgeConfig, LLMJudge, parse_verdict


def judge(url, tmp_path, **kw):
    return LLMJudge(JudgeConfig(model="scripted-judge", base_url=url, api_key="EMPTY",
                                cache_dir=str(tmp_path / "cache"), **kw))


@pytest.mark.parametrize("text,verdict", [("CORRECT", True), ("incorrect.", False), (" Correct\n", True),
                                          ("", None), ("maybe", None), ("CORRECT or INCORRECT", None)])
def test_verdicts_are_parsed_strictly(text, verdict):
    assert parse_verdict(text) is verdict


def test_judge_says_correct_and_incorrect(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path)
    ok = asyncio.run(j.judge("Who directed Ed Wood?", ["Tim Burton"], "tim burton"))
    bad = asyncio.run(j.judge("Who directed Ed Wood?", ["Tim Burton"], "Steven Spielberg"))
    assert (ok["correct"], ok["status"]) == (True, "ok") and (bad["correct"], bad["status"]) == (False, "ok")


def test_empty_replies_are_retried_then_accepted(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, retries=3)
    r = asyncio.run(j.judge("Q1?", ["Paris"], "Paris [[judge:empty:2]]"))
    assert r["status"] == "ok" and r["attempts"] == 3 and j.stats["retries"] == 2


def test_replies_that_never_parse_fall_back_to_exact_match_and_say_so(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, retries=2)
    r = asyncio.run(j.judge("Q2?", ["[[judge:garbage]] Paris"], "[[judge:garbage]] Paris"))
    assert r == {"correct": True, "status": "fallback", "attempts": 3, "raw": r["raw"]}
    r = asyncio.run(j.judge("Q3?", ["Rome"], "[[judge:empty]] Paris"))
    assert (r["correct"], r["status"]) == (False, "fallback")
    j2 = judge(endpoint_url, tmp_path, retries=0, fallback="incorrect")
    r = asyncio.run(j2.judge("Q4?", ["[[judge:empty]] x"], "[[judge:empty]] x"))
    assert (r["correct"], r["status"]) == (False, "fallback")


def test_verdicts_are_cached_on_disk_by_model_question_gold_and_prediction(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path)
    asyncio.run(j.judge("Q5?", ["Tim Burton"], "Tim Burton"))
    again = judge(endpoint_url, tmp_path)  # a new process would see the same file
    r = asyncio.run(again.judge("Q5?", ["Tim Burton"], "Tim Burton"))
    assert r["status"] == "cached" and again.stats["calls"] == 0
    r = asyncio.run(again.judge("Q5?", ["Tim Burton"], "Burton"))
    assert r["status"] == "ok" and again.stats["calls"] == 1


def test_missing_prediction_is_incorrect_without_a_call(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path)
    assert asyncio.run(j.judge("Q?", ["x"], None))["status"] == "no_prediction" and j.stats["calls"] == 0


def test_judge_many_keeps_order(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, concurrency=4)
    items = [(f"Q{i}?", ["yes"], "yes" if i % 2 else "no") for i in range(10)]
    assert [r["correct"] for r in asyncio.run(j.judge_many(items))] == [bool(i % 2) for i in range(10)]
