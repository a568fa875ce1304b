"""The LLM judge against a real scripted endpoint process: verdicts, retries, fallback and cache."""

import asyncio
import json
import urllib.parse
import urllib.request

import pytest

from agentrl.rollout.endpoint import FatalEndpointError
from agentrl.rollout.judge import JudgeConfig, LLMJudge, parse_verdict


def judge(url, tmp_path, **kw):
    return LLMJudge(JudgeConfig(model="scripted-judge", base_url=url, api_key="EMPTY",
                                cache_dir=str(tmp_path / "cache"), **kw))


@pytest.mark.parametrize("text,verdict", [
    ("CORRECT", True), ("incorrect.", False), (" Correct\n", True), ("**INCORRECT**", False), ("`correct`", True),
    ("Verdict: CORRECT", True), ("**Answer:** incorrect!", False), ("Final verdict: *CORRECT*", True),
    ("The prediction names the same person.\n\nCORRECT", True), ("<think>same city</think>\nINCORRECT", False),
    ("", None), ("  \n", None), ("maybe", None), ("CORRECT or INCORRECT", None),
    ("The predicted answer is not CORRECT.", None), ("It is CORRECT", None), ("INCORRECT, because", None),
    ("CORRECT\nbut the date is wrong", None), ("Verdict: not correct", None),
])
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


def test_a_sentence_containing_a_verdict_word_is_retried_not_believed(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, retries=1)
    r = asyncio.run(j.judge("Q6?", ["Rome"], "[[judge:hedge]] Paris"))  # every reply: "... is not CORRECT."
    assert (r["correct"], r["status"], r["attempts"]) == (False, "fallback", 2) and "not CORRECT" in r["raw"]


@pytest.mark.parametrize("model,prediction,error", [("missing-judge", "Paris", "NotFoundError"),
                                                    ("scripted-judge", "[[fail:401:1]] Paris", "AuthenticationError"),
                                                    ("scripted-judge", "[[fail:403:1]] Paris", "PermissionDenied")])
def test_a_judge_endpoint_refusing_the_request_stops_instead_of_falling_back(endpoint_url, tmp_path, model,
                                                                             prediction, error):
    j = LLMJudge(JudgeConfig(model=model, base_url=endpoint_url, api_key="EMPTY", cache_dir=str(tmp_path)))
    with pytest.raises(FatalEndpointError, match=f"judge model '{model}'.*{error}"):
        asyncio.run(j.judge(f"Q7 {error}?", ["Paris"], prediction))
    assert j.stats["fallbacks"] == 0


def test_a_rejected_request_falls_back_at_once(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, retries=3)
    r = asyncio.run(j.judge("Q8?", ["Paris"], "[[fail:400:9]] Paris"))
    assert (r["status"], r["attempts"]) == ("fallback", 1) and r["raw"].startswith("BadRequestError")
    assert j.stats["fallbacks"] == 1


def test_judge_extra_body_reaches_the_server(endpoint_url, tmp_path):
    j = judge(endpoint_url, tmp_path, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert asyncio.run(j.judge("Q9 extra body?", ["Oslo"], "Oslo"))["correct"] is True
    query = urllib.parse.urlencode({"contains": "Q9 extra body?"})
    with urllib.request.urlopen(f"{endpoint_url}/_requests?{query}", timeout=10) as resp:
        (body,) = json.loads(resp.read())["data"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["model"] == "scripted-judge"
