"""Math environment on real GSM8K problems: loader, calculator safety, math-verify scoring, oracle, judge."""

import asyncio
import json

import pytest

from agentrl.core.io import DataError
from agentrl.core.metrics import math_equal
from agentrl.envs.base import call_tool
from agentrl.envs.math.env import MathEnv, calculate, load_gsm8k, math_score
from agentrl.rollout.judge import JudgeConfig, LLMJudge

HELD_OUT = "data/samples/gsm8k_heldout_200.jsonl"


@pytest.fixture(scope="module")
def rows():
    return load_gsm8k(HELD_OUT)


def test_gsm8k_rows_carry_the_final_answer_and_the_reference_calculations(rows):
    assert len(rows) == 200 and rows[0]["id"] == "gsm8k_heldout_200:0"
    assert load_gsm8k("data/samples/gsm8k_train_100.jsonl")[0]["id"] == "gsm8k_train_100:0"  # two files, two ids
    assert all(r["golden_answers"][0] and "," not in r["golden_answers"][0] for r in rows)
    assert sum(bool(r["metadata"]["calculations"]) for r in rows) > 150


def test_the_held_out_slice_is_the_tail_of_the_training_file_and_train_drops_it():
    full = "/work/shared/data/gsm8k_train.jsonl"
    import os

    if not os.path.exists(full):
        pytest.skip("the shared GSM8K training file is not on this machine")
    train, held = load_gsm8k(full, split="train"), load_gsm8k(full, split="heldout")
    assert [r["question"] for r in held] == [r["question"] for r in load_gsm8k(HELD_OUT)]
    assert {r["question"] for r in train}.isdisjoint({r["question"] for r in held})


def test_a_bad_gsm8k_line_names_the_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "#### 3"}) + "\n" + json.dumps({"question": "q",
                   "answer": "no final answer"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2.*'answer'.*####"):
        load_gsm8k(bad)


@pytest.mark.parametrize("expr,value", [("48/2", 24), ("48+24", 72), ("(3 + 4) * 2", 14), ("2**10", 1024),
                                        ("1,000 * 3", 3000), ("7 // 2 + 7 % 2", 4), ("-3 * -3", 9), ("10/4", 2.5),
                                        ("12 x 3", 36)])
def test_the_calculator_evaluates_arithmetic(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize("expr", ["__import__('os').system('id')", "open('/etc/passwd').read()", "(1).__class__",
                                  "9**9**9", "10**400", "1/0", "a + 1", "[1, 2]", "lambda: 1", "'ab' * 3",
                                  "1e300 * 1e300", "(" * 150 + "1" + ")" * 150, "1 if 1 else 2", "True + 1", ""])
def test_the_calculator_refuses_everything_but_bounded_arithmetic(expr):
    with pytest.raises(ValueError):
        calculate(expr)


def test_a_refused_expression_reaches_the_model_as_an_error_and_the_env_keeps_serving():
    env = MathEnv()
    content, err = asyncio.run(call_tool(env, "calculator", {"expression": "__import__('os')"}))
    assert err == "tool_exception" and content.startswith("Error: ValueError")
    assert asyncio.run(call_tool(env, "calculator", {"expression": "6*7"})) == ("42", None)


@pytest.mark.parametrize("prediction,ok", [("72", True), ("72.0", True), ("$72$", True), ("\\boxed{72}", True),
                                           ("72 clips", True), ("73", False), ("", False), (None, False),
                                           ("7" * 2000, False)])
def test_answers_are_verified_by_math_verify(prediction, ok):
    assert math_equal(prediction, "72") is ok


def test_a_thousands_separator_in_the_answer_still_verifies():
    assert math_equal("1,200", "1200") and math_score("1,200", {"golden_answers": ["1200"]}, None)["correct"] == 1


def test_a_bare_string_gold_is_one_answer_for_the_score_and_the_oracle():
    from agentrl.envs.math.env import oracle_plan

    assert math_score("7", {"golden_answers": "72"}, None)["correct"] == 0.0  # not "any of '7', '2'"
    assert math_score("72", {"golden_answers": "72"}, None)["correct"] == 1.0
    assert oracle_plan({"golden_answers": "72"})[-1].content == "<answer>72</answer>"
    with pytest.raises(ValueError, match="golden_answers"):
        math_score("7", {"golden_answers": [7]}, None)


def test_math_correct_rewards_a_verified_answer_and_nothing_outside_math(rows):
    from agentrl.rollout.rewards import reward_registry, task_success
    math_correct = reward_registry()["math_correct"]

    env = MathEnv()
    env.reset(**rows[0])
    gold = rows[0]["golden_answers"]
    completions = [[{"role": "assistant", "content": f"The total is <answer>${gold[0]}.0$</answer>"}],
                   [{"role": "assistant", "content": "<answer>-1</answer>"}],
                   [{"role": "assistant", "content": gold[0]}]]  # no <answer> tags: not an answer
    assert math_correct(None, completions, environments=[env] * 3, golden_answers=[gold] * 3) == [1.0, 0.0, 0.0]
    assert task_success(None, completions, environments=[env] * 3, golden_answers=[gold] * 3) == [1.0, 0.0, 0.0]
    assert math_correct(None, completions[:1], environments=[None], golden_answers=[gold]) == [None]


def test_the_oracle_scores_one_on_the_held_out_slice_without_calculator_errors(rows, tmp_path):
    from agentrl.envs.math import math_task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    task = math_task()
    metrics = run_batch(OraclePolicy(task.oracle_plan), task, rows[:40], tmp_path, RunConfig(progress=False))
    assert metrics["n"] == 40 and metrics["errors"] == 0 and metrics["overall"]["em"] == 1.0
    recs = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()]
    assert not any(m["content"].startswith("Error") for r in recs for m in r["messages"] if m["role"] == "tool")
    assert sum(r["metrics"]["calculator_calls"] for r in recs) > 40


def _judge(url, tmp_path, **kw):
    return LLMJudge(JudgeConfig(model="scripted-judge", base_url=url, api_key="EMPTY", fallback="math_verify",
                                cache_dir=str(tmp_path / "cache"), **kw))


def test_the_math_judge_survives_empty_replies_malformed_verdicts_and_429s(endpoint_url, tmp_path):
    j = _judge(endpoint_url, tmp_path, retries=2)

    async def go():
        try:
            return [await j.judge("[[fail:429:2]] How many?", ["72"], "72"),
                    await j.judge("Q empty", ["72"], "72 [[judge:empty:1]]"),
                    # the scripted judge never gives a verdict here: math-verify decides, and it is recorded
                    await j.judge("Q garbage", ["72"], "[[judge:garbage]] $72.0$"),
                    await j.judge("Q garbage wrong", ["72"], "[[judge:garbage]] 73")]
        finally:
            await j.aclose()

    r429, empty, garbage, wrong = asyncio.run(go())
    assert (r429["correct"], r429["status"]) == (True, "ok")
    assert (empty["correct"], empty["status"], empty["attempts"]) == (True, "ok", 2)
    assert (garbage["correct"], garbage["status"], garbage["attempts"]) == (True, "fallback", 3)
    assert (wrong["correct"], wrong["status"]) == (False, "fallback")
    assert j.stats["fallbacks"] == 2


def test_math_judge_verdicts_are_cached_on_disk_across_judges(endpoint_url, tmp_path):
    async def once():
        j = _judge(endpoint_url, tmp_path)
        try:
            return await j.judge("Cache me", ["5"], "5")
        finally:
            await j.aclose()

    assert asyncio.run(once())["status"] == "ok"
    assert asyncio.run(once())["status"] == "cached"
