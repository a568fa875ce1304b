"""Mixed-task training: rows in the configured proportions, each routed to its env and scored by its family;
a real GRPO run on the tiny model (fresh LoRA, CPU) logs every family's reward separately."""

import asyncio
import json
from collections import Counter

import pytest

from agentrl.envs.base import call_tool
from agentrl.envs.code import humaneval_tasks
from agentrl.envs.math import load_gsm8k
from agentrl.envs.mixed import MixedEnv, mixed_score, mixture_rows
from agentrl.rewards import task_success

MATH = load_gsm8k("data/samples/gsm8k_train_100.jsonl")
CODE = humaneval_tasks()


def test_mixture_rows_follow_the_proportions_and_carry_their_family():
    rows = mixture_rows({"math": 0.5, "code": 0.25, "textgame": 0.25},
                        {"math": MATH, "code": CODE, "textgame": [{"id": f"g{i}", "metadata": {"seed": i}}
                                                                  for i in range(5)]}, 10)
    assert Counter(r["env"] for r in rows) == {"math": 5, "code": 3, "textgame": 2}  # largest remainder
    assert all(json.loads(r["task"]) == (r.get("metadata") or {}) for r in rows)
    with pytest.raises(ValueError, match="only 1"):
        mixture_rows({"math": 1.0}, {"math": MATH[:1]}, 2)


def test_each_row_goes_to_its_own_env_and_a_foreign_tool_is_an_error_for_the_model():
    env = MixedEnv()
    math_row = {**MATH[0], "env": "math", "task": json.dumps(MATH[0]["metadata"])}
    env.reset(**math_row)
    assert asyncio.run(call_tool(env, "calculator", {"expression": "48/2"})) == ("24", None)
    content, err = asyncio.run(call_tool(env, "run_python", {"code": "print(1)"}))
    assert err == "tool_exception" and "not part of this math task; its tools: calculator" in content
    assert mixed_score(MATH[0]["golden_answers"][0], math_row, env)["correct"] == 1.0
    code_row = {**CODE[0], "env": "code", "task": json.dumps(CODE[0]["metadata"])}
    env.reset(**code_row)
    content, err = asyncio.run(call_tool(env, "run_python", {"code": "print(6 * 7)"}))
    assert err is None and "42" in content
    solution = CODE[0]["metadata"]["prompt"] + CODE[0]["metadata"]["canonical_solution"]
    assert mixed_score(solution, code_row, env)["passed"] == 1.0


def test_task_success_scores_each_family_and_logs_them_separately():
    math_env, code_env = MixedEnv(), MixedEnv()
    math_env.reset(**{**MATH[0], "env": "math"})
    code_env.reset(**{**CODE[0], "env": "code", "task": json.dumps(CODE[0]["metadata"])})
    solution = CODE[0]["metadata"]["prompt"] + CODE[0]["metadata"]["canonical_solution"]
    completions = [[{"role": "assistant", "content": f"<answer>{MATH[0]['golden_answers'][0]}</answer>"}],
                   [{"role": "assistant", "content": f"<answer>{solution}</answer>"}],
                   [{"role": "assistant", "content": "<answer>-1</answer>"}]]
    logged = {}
    scores = task_success(None, completions, environments=[math_env, code_env, math_env],
                          env=["math", "code", "math"], golden_answers=[MATH[0]["golden_answers"]] * 2 + [["5"]],
                          log_metric=lambda k, v: logged.__setitem__(k, v))
    assert scores == [1.0, 1.0, 0.0]
    assert logged == {"math/reward": 0.5, "math/success": 0.5, "code/reward": 1.0, "code/success": 1.0}
    assert task_success(None, completions[:1], environments=[None], env=["math"]) == [None]


def test_a_mixed_grpo_run_trains_steps_and_logs_every_familys_reward(tiny_model, tmp_path):
    from agentrl.train.grpo import GRPOSettings, run_grpo
    from agentrl.train.models import ModelConfig

    cfg = GRPOSettings(name="mixed", env="mixed", mixture={"math": 0.5, "code": 0.5}, mixture_rows=8,
                       model=ModelConfig(name=str(tiny_model)), num_generations=4, batch_size=8, max_steps=2,
                       learning_rate=3e-4, max_completion_length=96, max_tool_calling_iterations=1,
                       rewards={"task_success": 1.0, "format": 0.1}, eval_questions=0, report_to=[],
                       log_completions=False, seed=1)
    result = run_grpo(cfg, {}, runs=tmp_path)
    assert result.metrics["steps"] == 2 and result.metrics["train_rows"] == 8
    history = json.loads((tmp_path / "grpo" / "mixed" / "metrics.json").read_text())["history"]
    keys = {k for h in history for k in h}
    assert "rewards/task_success" in keys
    assert {"math/reward", "code/reward"} <= keys, keys
