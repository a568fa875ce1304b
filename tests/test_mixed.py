"""Mixed-task training ([grpo.mixed]: its mixture and member tables): rows in the configured proportions, each routed
to its env and scored by its family; a real GRPO run on the tiny model (fresh LoRA, CPU) logs every family's reward
separately."""

import asyncio
import json
from collections import Counter

import pytest

from agentrl.core.heldout import HeldOut
from agentrl.envs.base import call_tool
from agentrl.envs.code.env import humaneval_tasks
from agentrl.envs.math.env import load_gsm8k
from agentrl.envs.mixed.env import MixedEnv, mixed_score, mixture_rows
from agentrl.rollout.rewards import reward_registry, task_success
from agentrl.train.configs import GRPOSettings
from agentrl.train.trainers import family_summary
from conftest import HOTPOT

code_pass = reward_registry()["code_pass"]
math_correct = reward_registry()["math_correct"]

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


def test_task_success_scores_each_family_by_its_own_scorer():
    math_env, code_env = MixedEnv(), MixedEnv()
    math_env.reset(**{**MATH[0], "env": "math"})
    code_env.reset(**{**CODE[0], "env": "code", "task": json.dumps(CODE[0]["metadata"])})
    solution = CODE[0]["metadata"]["prompt"] + CODE[0]["metadata"]["canonical_solution"]
    completions = [[{"role": "assistant", "content": f"<answer>{MATH[0]['golden_answers'][0]}</answer>"}],
                   [{"role": "assistant", "content": f"<answer>{solution}</answer>"}],
                   [{"role": "assistant", "content": "<answer>-1</answer>"}]]
    golds = [MATH[0]["golden_answers"], CODE[0]["golden_answers"], ["5"]]
    envs = [math_env, code_env, math_env]
    assert task_success(None, completions, environments=envs, golden_answers=golds) == [1.0, 1.0, 0.0]
    assert math_correct(None, completions, environments=envs, golden_answers=golds) == [1.0, None, 0.0]
    assert code_pass(None, completions, environments=envs, golden_answers=golds) == [None, 1.0, None]
    assert task_success(None, completions[:1], environments=[None]) == [None]


def test_family_summary_is_each_familys_total_reward_and_its_success():
    summary = family_summary(["math", "code", "math", "code", None], [1.1, 0.05, float("nan"), 0.25, 3.0],
                             [1.0, 0.0, 0.0, 0.0, 1.0])
    assert summary == {"code/reward": pytest.approx(0.15), "code/success": 0.0, "math/reward": pytest.approx(1.1),
                       "math/success": 0.5}


def test_the_trainer_logs_each_familys_weighted_total_reward_not_its_success(tiny_model, tmp_path):
    """The real trainer's reward step on hand-made completions: <family>/reward is the weighted sum of every
    reward function over that family's rows (1.0 x task_success + 0.5 x format), <family>/success the success."""
    from agentrl.train.configs import trl_args
    from agentrl.train.grpo import build_task, derived_args, make_trainer
    from agentrl.train.models import load_for_training

    cfg = GRPOSettings.of(name="fam", env="mixed", model={"name": str(tiny_model)}, num_generations=2,
                          per_device_train_batch_size=4, max_steps=1, eval_questions=0, report_to=[],
                          log_completions=False, optim="adamw_torch", gradient_checkpointing=False,
                          mixed={"mixture": {"math": 0.5, "code": 0.5}, "train": 4,
                                 "rewards": {"task_success": 1.0, "format": 0.5}})
    loaded = load_for_training(cfg.model)
    task = build_task(cfg, {})
    args = trl_args(cfg, derived_args(cfg, loaded.backend, tmp_path))
    trainer = make_trainer(cfg, args, loaded, task, [{"prompt": [{"role": "user", "content": "q"}]}])
    rows = [{**MATH[0], "env": "math"}, {**MATH[1], "env": "math"},
            {**CODE[0], "env": "code", "task": json.dumps(CODE[0]["metadata"])},
            {**CODE[1], "env": "code", "task": json.dumps(CODE[1]["metadata"])}]
    envs = [task.make_env() for _ in rows]
    for env, row in zip(envs, rows, strict=True):
        env.reset(**row)
    solution = CODE[0]["metadata"]["prompt"] + CODE[0]["metadata"]["canonical_solution"]
    answered = [{"role": "assistant", "content": f"<answer>{MATH[0]['golden_answers'][0]}</answer>"}]  # format 0.5
    completions = [answered, [{"role": "assistant", "content": "no answer"}],
                   [{"role": "assistant", "content": f"<answer>{solution}</answer>"}],
                   [{"role": "assistant", "content": "<answer>def f(): pass</answer>"}]]
    inputs = [{"env": r["env"], "golden_answers": r["golden_answers"]} for r in rows]
    trainer.environments = envs
    trainer._pending_metrics.clear()
    trainer._calculate_rewards(inputs, [[{"role": "user", "content": "q"}]] * 4, completions, [[1]] * 4)
    logged = {k: sum(v) / len(v) for k, v in trainer._pending_metrics.items()}
    # math: (1 + 0.5 x 0.5) and (0 + 0); code: (1 + 0.5 x 0.5) and (0 + 0.5 x 0.5)
    assert logged == {"math/reward": pytest.approx(0.625), "math/success": 0.5,
                      "code/reward": pytest.approx(0.75), "code/success": 0.5}


def test_held_out_rows_of_a_mixed_run_are_evaluation_items_never_trained_on():
    from agentrl.train.grpo import heldout_rows, train_rows

    cfg = GRPOSettings.of(env="mixed", mixed={"mixture": {"textgame": 1, "math": 1, "code": 1}, "train": 6,
                                              "heldout": 6})
    train, held = train_rows(cfg, HeldOut(), {}), heldout_rows(cfg, {})
    assert len(train) == len(held) == 6
    folds = {r["env"]: json.loads(r["task"]).get("fold") for r in held}
    assert folds["textgame"] == "dev" and {json.loads(r["task"]).get("fold") for r in train
                                            if r["env"] == "textgame"} == {"train"}
    heldout_math = {r["question"] for r in load_gsm8k("data/samples/gsm8k_heldout_200.jsonl")}
    assert all(r["question"] in heldout_math for r in held if r["env"] == "math")
    assert not any(r["question"] in heldout_math for r in train if r["env"] == "math")
    assert all(int(r["id"].split("/")[1]) >= 100 for r in held if r["env"] == "code")
    assert all(int(r["id"].split("/")[1]) < 100 for r in train if r["env"] == "code")


def mixed_search(index, **kw) -> GRPOSettings:
    """A mixture of search and math whose search member's table names ``index`` and the sample QA file."""
    return GRPOSettings.of(env="mixed", eval_questions=2, **kw,
                           mixed={"mixture": {"search": 0.5, "math": 0.5}, "train": 4, "heldout": 2,
                                  "search": {"index": str(index), "qa": str(HOTPOT), "top_k": 2}})


def test_search_joins_the_mixture_over_its_member_tables_index_and_a_missing_index_is_named(small_index, tmp_path):
    from agentrl.core.io import DataError
    from agentrl.train.grpo import build_task, heldout_rows, train_rows

    with pytest.raises(DataError, match="agentrl index --corpus"):
        build_task(mixed_search(tmp_path / "none"), {})
    cfg = mixed_search(small_index)
    assert cfg.env_settings.envs["search"].top_k == 2
    task = build_task(cfg, {})
    assert "`search` tool" in task.system_prompt and "`act`" in task.system_prompt
    train, held = train_rows(cfg, HeldOut(), {}), heldout_rows(cfg, {})
    row = next(r for r in train if r["env"] == "search")
    assert {r["id"] for r in held if r["env"] == "search"} <= {f"dev_{i}" for i in range(150, 200)}
    env = task.make_env()
    env.reset(**row)
    content, err = asyncio.run(call_tool(env, "search", {"query": row["question"]}))
    assert err is None and content.startswith("Doc 1 (Title:")
    assert mixed_score(row["golden_answers"][0], row, env)["em"] == 1.0
    env.reset(**next(r for r in train if r["env"] == "math"))
    content, err = asyncio.run(call_tool(env, "search", {"query": "x"}))
    assert err == "tool_exception" and "its tools: calculator" in content


@pytest.mark.slow
def test_a_mixed_grpo_run_with_search_trains_steps_and_logs_every_familys_reward(tiny_model, small_index, tmp_path):
    from agentrl.train.grpo import run_grpo

    cfg = GRPOSettings.of(name="mixed", env="mixed", model={"name": str(tiny_model)}, num_generations=4,
                          per_device_train_batch_size=8, max_steps=3, learning_rate=3e-4, lr_scheduler_type="constant",
                          optim="adamw_torch", gradient_checkpointing=False, logging_steps=1,
                          max_completion_length=96, max_tool_calling_iterations=1, eval_questions=0, report_to=[],
                          log_completions=False, seed=1,
                          mixed={"mixture": {"math": 1, "code": 1, "search": 1}, "train": 6,
                                 "rewards": {"task_success": 1.0, "format": 0.1},
                                 "search": {"index": str(small_index), "qa": str(HOTPOT), "top_k": 2,
                                            "passage_chars": 100}})
    result = run_grpo(cfg, HeldOut(), {}, runs=tmp_path)
    assert result.metrics["steps"] == 3 and result.metrics["train_rows"] == 6
    history = json.loads((tmp_path / "grpo" / "mixed" / "metrics.json").read_text())["history"]
    keys = {k for h in history for k in h}
    assert "rewards/task_success" in keys
    # 3 steps of 2 items: the 6 rows once, so every family was trained and logged
    assert {f"{f}/{m}" for f in ("math", "code", "search") for m in ("reward", "success")} <= keys, keys


@pytest.mark.parametrize("env,reward", [("textgame", "game_score"), ("math", "math_correct"), ("code", "code_pass"),
                                        ("mixed", "task_success")])
def test_each_env_trains_on_its_own_reward_from_the_envs_preset_and_from_a_search_preset(env, reward):
    from agentrl.app.presets import load
    from agentrl.train.grpo import reward_functions

    own = load("envs_demo", [f'grpo.env="{env}"']).grpo()  # `agentrl grpo --config envs_demo --env ENV`
    assert own.env == env and reward in own.rewards and "answer_f1" not in own.rewards
    assert own.rewards == own.envs[env].rewards  # its [grpo.<env>] table's
    assert own.model.name == "runs/models/tiny" and reward_functions(own)[0]
    # the demo's [grpo] trains search ([grpo.search] rewards answer_f1): another env takes that env's defaults
    other = load("demo", [f'grpo.env="{env}"', "grpo.max_steps=1"]).grpo()
    assert other.env == env and other.max_steps == 1 and env not in other.envs and "answer_f1" not in other.rewards
    assert list(other.rewards) == [reward, "format"] and reward_functions(other)[0]


def test_a_reward_that_cannot_score_the_env_is_refused_naming_it():
    from agentrl.core.io import DataError
    from agentrl.train.grpo import reward_functions

    for env, rewards, match in (
            ("textgame", {"answer_f1": 1.0}, "textgame.rewards.answer_f1.*compares the answer text.*textgame"),
            ("math", {"game_score": 1.0}, "math.rewards.game_score.*game_score scores textgame episodes only"),
            ("code", {"answer_em": 1.0}, "code.rewards.answer_em.*compares the answer text.*code"),
            ("mixed", {"sql_execution": 1.0}, "mixed.rewards.sql_execution.*sql_execution scores sql episodes only")):
        table = {"rewards": rewards, **({"mixture": {"math": 1.0, "code": 1.0}} if env == "mixed" else {})}
        with pytest.raises(DataError, match=match):
            GRPOSettings.of(env=env, **{env: table})
    assert reward_functions(GRPOSettings.of(env="math", math={"rewards": {"answer_em": 1.0, "math_correct": 1.0}}))[0]
