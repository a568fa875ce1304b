"""Phase 04: multi-turn GRPO with real TRL, real tools in the rollouts, on the SFT'd tiny model, on CPU."""

import asyncio
import dataclasses
import importlib.util
import json
import sys

import pytest

from agentrl.core.heldout import HeldOut
from agentrl.envs.registry import Budget
from agentrl.rollout.rewards import answer_em, answer_f1, format_reward, make_judge_reward, tool_use
from agentrl.train.configs import GRPOSettings
from agentrl.train.grpo import run_grpo
from conftest import (
    DBBENCH,
    HOTPOT,
    SCRIPTED,
    UNSLOTH_MISSING,
    free_port,
    run_cli_on_unsloth_cpu,
    start_process,
    stop_process,
    train_grpo_capturing,
)

GRPO_TABLE = {"num_generations": 4, "per_device_train_batch_size": 8, "max_steps": 2, "learning_rate": 3e-4,
              "lr_scheduler_type": "constant", "optim": "adamw_torch", "gradient_checkpointing": False,
              "max_completion_length": 256, "max_tool_calling_iterations": 2, "eval_questions": 0, "report_to": [],
              "log_completions": False, "logging_steps": 1, "seed": 1}


def settings(trained, tiny_model, small_index, rewards=None, **kw) -> GRPOSettings:
    """GRPO from the SFT adapter on questions 0..59 (60.. held out) over the small test index."""
    search = {"index": str(small_index), "qa": str(HOTPOT), "train": 60, "heldout": 140, "top_k": 2,
              "passage_chars": 120, "max_tool_calls": 3, **({"rewards": rewards} if rewards else {})}
    built = GRPOSettings.of(**{"model": {"name": str(tiny_model)}, "adapter": str(trained.out / "adapter"),
                               "search": search, **GRPO_TABLE, **kw})
    return dataclasses.replace(built, budget=Budget(max_turns=4))  # a preset's [eval.search] budget


def call(query: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}]}


GOOD = [call("Ed Wood"), {"role": "tool", "name": "search", "content": "Doc 1 (Title: Ed Wood) ..."},
        {"role": "assistant", "content": "He is American. <answer>Tim Burton</answer>"}]
NO_TOOL = [{"role": "assistant", "content": "<answer>Tim Burton</answer>"}]
RAW_CALL = [{"role": "assistant", "content": '<tool_call>{"name": "search", "argu'}]
TOOL_ERROR = [call(""), {"role": "tool", "name": "search", "content": "{'error': 'query must be a non-empty string'}"},
              {"role": "assistant", "content": "<answer>Tim</answer>"}]


def test_reward_functions_on_hand_made_completions():
    gold = [["Tim Burton"]] * 4
    completions = [GOOD, NO_TOOL, RAW_CALL, TOOL_ERROR]
    assert answer_f1(None, completions, golden_answers=gold) == [1.0, 1.0, 0.0, pytest.approx(2 / 3)]
    assert answer_em(None, completions, golden_answers=gold) == [1.0, 1.0, 0.0, 0.0]
    assert format_reward(None, completions) == [1.0, 0.5, 0.0, 0.5]
    assert tool_use(None, completions) == [1.0, 0.0, 0.0, 0.0]
    assert answer_f1(None, ["plain <answer>tim burton</answer>"], golden_answers=[["Tim Burton"]]) == [1.0]


def trl_episode(env, tool: str, args: dict) -> list[dict]:
    """A completion as TRL 1.14's tool loop builds it: the call, str(result) or str({"error": str(exc)}), an answer."""
    import asyncio
    import inspect

    try:
        fn = getattr(env, tool)
        content = str(asyncio.run(fn(**args)) if inspect.iscoroutinefunction(fn) else fn(**args))
    except Exception as exc:  # noqa: BLE001 - as TRL does
        content = str({"error": str(exc)})
    return [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
             "name": tool, "arguments": args}}]}, {"role": "tool", "name": tool, "content": content},
            {"role": "assistant", "content": "<answer>5</answer>"}]


def test_the_same_mistake_scores_alike_in_every_environment_from_one_typed_signal():
    """A call the tool refused or crashed on is well-formed (format 1.0) but no successful call (tool_use 0.0),
    whether a calculator raised ValueError, a statement failed or the search budget was spent; a call to no tool is
    malformed. Before one typed signal: format 0.5 / 1.0 / 1.0 and tool_use 0 / 1.0 / 1.0."""
    import asyncio

    from agentrl.envs.base import call_tool
    from agentrl.envs.math import math_task
    from agentrl.envs.search.env import search_task
    from agentrl.envs.sql import sql_task
    from agentrl.envs.sql.dbbench import load_dbbench

    row = load_dbbench(DBBENCH)[0]
    cases = [(math_task(), {}, "calculator", {"expression": "2 +"}),
             (sql_task(), row, "execute_sql", {"query": "SELEC 1"}),
             (search_task(None, max_searches=0), {"question": "q"}, "search", {"query": "Ed Wood"})]
    for task, reset, tool, args in cases:
        env = task.make_env()
        env.reset(**reset)
        completion = trl_episode(env, tool, args)
        assert completion[1]["content"].startswith("{'error'"), completion
        assert format_reward(None, [completion], environments=[env]) == [1.0], tool
        assert tool_use(None, [completion], environments=[env]) == [0.0], tool
        env.reset(**reset)  # our agent loop: the kind is on the message
        content, kind = asyncio.run(call_tool(env, tool, args))
        ours = [completion[0], {"role": "tool", "name": tool, "content": content, "error": kind}, completion[2]]
        assert kind in ("tool_error", "tool_exception") and format_reward(None, [ours]) == [1.0], tool
        assert tool_use(None, [ours]) == [0.0], tool
        env.reset(**reset)
        unknown = trl_episode(env, "no_such_tool", {})
        assert format_reward(None, [unknown], environments=[env]) == [0.5], tool


@pytest.fixture(scope="module")
def empty_judge_url():
    port = free_port()
    proc = start_process([sys.executable, str(SCRIPTED), "--port", str(port), "--judge", "empty"],
                         port)
    yield f"http://127.0.0.1:{port}/v1"
    stop_process(proc)


def test_judge_reward_retries_empty_replies_then_falls_back(empty_judge_url, tmp_path):
    from agentrl.rollout.judge import JudgeConfig, LLMJudge

    judge = LLMJudge(JudgeConfig(model="j", base_url=empty_judge_url, api_key="EMPTY", retries=2,
                                 cache_dir=str(tmp_path)))
    reward = make_judge_reward(judge)
    logged = {}
    scores = asyncio.run(reward([[{"role": "user", "content": "Who directed Ed Wood?"}]] * 3,
                                [GOOD, NO_TOOL, RAW_CALL], golden_answers=[["Tim Burton"], ["Spielberg"], ["x"]],
                                log_metric=lambda k, v: logged.__setitem__(k, v)))
    assert scores == [1.0, 0.0, 0.0]  # exact-match fallback; RAW_CALL has no answer at all
    assert judge.stats["fallbacks"] == 2 and judge.stats["calls"] == 2 * 3  # 1 try + 2 retries each
    assert logged["judge/fallback_share"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_grpo_rollouts_call_real_tools_and_no_tool_output_carries_loss(trained, tiny_model, small_index, tmp_path):
    trainer, trained_text, masked_text = train_grpo_capturing(settings(trained, tiny_model, small_index, max_steps=2),
                                                              {}, tmp_path)
    # whatever the model sampled: a tool's result follows a call of the model's own, which carries loss, and never
    # carries loss itself (how often it calls is the demo's and the benchmarks' figure, not bet on here)
    logged = [h["tools/call_frequency"] for h in trainer.state.log_history if "tools/call_frequency" in h]
    assert len(logged) == 2  # the environment's tools were in the rollouts' loop at every step
    called = any(f > 0 for f in logged)
    for t, m in zip(trained_text, masked_text, strict=True):
        assert "Doc 1 (Title:" not in t and "<tool_response>" not in t  # retrieved text never carries loss
        if m:
            assert "<tool_response>" in m and "<tool_call>" in t and called


def test_a_rollout_ending_on_an_unanswered_call_with_rounds_left_counts_as_cut_by_length():
    from agentrl.train.trainers import cut_by_length

    result = {"role": "tool", "name": "search", "content": "Doc 1 ..."}
    assert not cut_by_length(GOOD, 2) and not cut_by_length(NO_TOOL, 2) and not cut_by_length([], 2)
    assert cut_by_length([call("Ed Wood")], 2)  # the first result did not fit: dropped, no answer
    assert cut_by_length([call("Ed Wood"), result, call("Tim Burton")], 2)
    assert not cut_by_length([call("a"), result, call("b"), result, call("c")], 2)  # the iteration limit instead

def test_a_completion_budget_smaller_than_an_episode_is_counted_and_warned_about():
    """Hand-made rollouts: one answered, three ended on a call whose result did not fit the budget (TRL drops the
    result and ends the rollout); the share is logged every step, the warning given above WARN_SHARE."""
    from agentrl.train.trainers import WARN_SHARE, budget_note

    cut = [call("Ed Wood")]
    share, warning = budget_note([GOOD, cut, cut, cut], 2, 64)
    assert share == 0.75 > WARN_SHARE
    assert warning.startswith("GRPO: 3 of 4 rollouts ran out of max_completion_length = 64 before answering")
    assert budget_note([GOOD, NO_TOOL, cut, GOOD], 2, 64) == (0.25, None)  # at the threshold: logged, not warned


@pytest.mark.slow
def test_a_run_whose_budget_holds_a_call_but_not_its_result_counts_every_call_as_cut(trained, tiny_model,
                                                                                      small_index, tmp_path):
    """64 tokens hold a call, not the call and its result: whatever the model samples, every rollout that calls is
    cut (the result never comes back), so rollouts are cut exactly when some call, and never more than call."""
    result = run_grpo(settings(trained, tiny_model, small_index, name="cut", max_steps=1,
                               max_completion_length=64), HeldOut(), runs=tmp_path)
    h = result.metrics["history"][0]
    assert (h["tools/cut_by_length"] > 0) == (h["tools/call_frequency"] > 0), h
    assert h["tools/cut_by_length"] <= h["tools/call_frequency"] + 1e-9, h  # a rollout may call twice in one turn



@pytest.mark.slow
def test_run_writes_adapter_and_evaluates_the_current_policy(trained, tiny_model, small_index, tmp_path, capfd):
    capfd.readouterr()
    result = run_grpo(settings(trained, tiny_model, small_index, name="ev", max_steps=2, eval_every=1,
                               eval_questions=3, rewards={"answer_f1": 1.0, "format": 0.2},
                               report_to=["tensorboard"]), HeldOut(), runs=tmp_path)
    out = tmp_path / "grpo" / "ev"
    # a progress line, not transformers' log dicts; every step and held-out evaluation in log.jsonl and TensorBoard
    printed = capfd.readouterr().out
    assert "{'loss'" not in printed and "'reward':" not in printed, printed
    assert "GRPO ev: step 2/2" in printed, printed
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "reward" in r] == [1, 2]
    assert [r["step"] for r in log if "heldout/f1" in r] == [1, 2]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = {}
    for events in (out / "trainer" / "runs").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, set()).update(e.step for e in acc.Scalars(tag))
    assert scalars.get("heldout/f1") == {1, 2} and "train/reward" in scalars, sorted(scalars)
    assert (out / "adapter" / "adapter_config.json").exists()
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["step"] for e in metrics["evals"]] == [1, 2]
    assert {"rewards/answer_f1", "rewards/format", "tools/call_frequency", "frac_reward_zero_std",
            "completions/mean_length", "groups/skipped", "groups/total",
            "tools/cut_by_length"} <= set(metrics["history"][0])
    assert all(0 <= h["tools/cut_by_length"] <= 1 for h in metrics["history"])  # a share, whatever was sampled
    for h in metrics["history"]:  # the equal-reward groups skipped are those TRL counts as zero-std
        assert h["groups/total"] == 2 and h["groups/skipped"] == round(h["frac_reward_zero_std"] * 2)
    assert (out / "eval" / "step_2" / "trajectories.jsonl").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["phase"] == "grpo"
    assert manifest["counts"]["groups_skipped"] == sum(h["groups/skipped"] for h in metrics["history"])
    assert result.metrics["evals"][-1]["n"] == 3


@pytest.mark.slow
def test_a_judge_that_only_returns_empty_replies_does_not_stop_training(trained, tiny_model, small_index,
                                                                        empty_judge_url, tmp_path):
    cfg = settings(trained, tiny_model, small_index, name="judge", rewards={"judge": 1.0, "tool_use": 0.1},
                   judge={"model": "j", "base_url": empty_judge_url, "api_key": "EMPTY", "retries": 1,
                          "cache_dir": str(tmp_path / "cache")})
    result = run_grpo(cfg, HeldOut(), runs=tmp_path)
    assert result.metrics["history"] and all("rewards/judge" in s for s in result.metrics["history"])
    assert result.metrics["reward_funcs"] == ["judge", "tool_use"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason=UNSLOTH_MISSING)
@pytest.mark.parametrize("from_adapter", [False, True], ids=["fresh-lora", "from-sft-adapter"])
def test_unsloth_backend_runs_grpo_steps_with_tools_on_its_cpu_path(trained, tiny_model, small_index, tmp_path,
                                                                    from_adapter):
    """Unsloth's loader and LoRA (or the SFT adapter loaded through Unsloth) under GRPO with the search tool.

    A subprocess: importing unsloth patches trl and transformers for the whole process."""
    adapter = f'adapter = "{trained.out / "adapter"}"\n' if from_adapter else ""
    preset = tmp_path / "u.toml"
    preset.write_text(f'[grpo]\nname = "u"\n{adapter}num_generations = 4\nper_device_train_batch_size = 4\n'
                      f'max_steps = 2\nmax_completion_length = 128\nmax_tool_calling_iterations = 2\n'
                      f'eval_questions = 2\nreport_to = []\nlog_completions = false\n'
                      f'[grpo.search]\nindex = "{small_index}"\nqa = "{HOTPOT}"\ntrain = 20\ntop_k = 2\n'
                      f'passage_chars = 120\nrewards = {{answer_f1 = 1.0, tool_use = 0.5}}\n'
                      f'[grpo.model]\nname = "{tiny_model}"\nbackend = "unsloth"\n[eval.search]\nmax_turns = 3\n')
    run_cli_on_unsloth_cpu(["grpo", "--config", str(preset)], tmp_path)
    out = tmp_path / "runs" / "grpo" / "u"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["backend"] == "unsloth" and metrics["steps"] == 2
    # logged only when the environment's tools were in the rollouts' loop
    assert "tools/call_frequency" in metrics["history"][-1] and metrics["evals"][-1]["n"] == 2
    assert (out / "adapter" / "adapter_config.json").exists()
