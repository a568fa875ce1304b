"""The agent loop: a policy and an environment take turns until the policy answers or runs out of turns.

``run_episode(policy, task, row)`` returns one trajectory (the format every phase reads, docs/formats.md).
A bad model reply never crashes the loop: unknown tools, invalid JSON arguments, unparseable tool calls
and exceptions inside tools come back to the model as tool messages; the answer is the last
``<answer>...</answer>`` of the final assistant turn.
"""

from __future__ import annotations

import time
from typing import Any

from agentrl.core.chat import Turn, extract_answer
from agentrl.data.trajectories import reasoning_chars, usage_summary
from agentrl.envs.base import _in_thread, call_tool, tool_schemas

HEAVY_METADATA = ("context", "paragraphs", "table")  # large per-row fields kept out of trajectories




def assistant_message(turn: Turn) -> dict:
    """Return the trajectory message for an assistant turn (OpenAI shape, plus ``reasoning`` when given)."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.content or ""}
    if turn.tool_calls:
        msg["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in turn.tool_calls]
    if turn.reasoning:
        msg["reasoning"] = turn.reasoning
    return msg


async def run_episode(policy, task, row: dict, *, max_turns: int = 6, env=None, budget: int | None = None) -> dict:
    """Run one task row to completion and return its trajectory (metrics included). ``budget``: the tokens after the
    prompt an episode may use, the model's and the tool results' (GRPO's ``max_completion_length``): a turn that
    starts or ends over it ends the episode with finish ``length`` and no answer, as TRL's rollout would be cut.

    Exceptions from the policy (after its own retries) propagate; the batch runner records them.
    """
    if env is None:  # ours: its episode resources (a database, a server user) are released once it is scored
        env = task.make_env()
        try:
            return await _run_episode(policy, task, row, max_turns, env, budget)
        finally:
            close = getattr(env, "_close", None)
            if close is not None:
                close()
    return await _run_episode(policy, task, row, max_turns, env, budget)


def _over(turn: Turn, first_prompt: int, budget: int | None) -> tuple[bool, bool]:
    """Return ``(before, after)``: whether the conversation after the prompt was over ``budget`` tokens before this
    turn was generated (the tool results it read) and after it."""
    if budget is None or not turn.prompt_tokens:
        return False, False
    used = turn.prompt_tokens - first_prompt
    return used > budget, used + (turn.completion_tokens or 0) > budget


async def _run_episode(policy, task, row: dict, max_turns: int, env, budget: int | None = None) -> dict:
    env.reset(**row)
    tools = tool_schemas(env)
    messages: list[dict] = [{"role": "system", "content": task.system_prompt},
                            {"role": "user", "content": row["question"]}]
    per_turn: list[dict] = []
    tool_errors: dict[str, int] = {}
    n_tool_calls, llm_s, tool_s = 0, 0.0, 0.0
    finish = "max_turns"
    started = time.time()
    first_prompt = None
    for turn_no in range(max_turns):
        turn = await policy.generate(messages, tools, row)
        llm_s += turn.latency_s
        per_turn.append({"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
                         "latency_s": round(turn.latency_s, 4), "finish_reason": turn.finish_reason})
        first_prompt = turn.prompt_tokens if first_prompt is None else first_prompt
        before, after = _over(turn, first_prompt, budget)
        if before:  # the tool results alone overflowed: TRL would have ended the rollout before this turn
            finish = "length"
            break
        messages.append(assistant_message(turn))
        if after:
            finish = "length"
            break
        if not turn.tool_calls:
            if extract_answer(turn.content) is not None:
                finish = "answer"
            elif turn.finish_reason == "length":
                finish = "length"
            else:
                finish = "no_answer"
            break
        for i, call in enumerate(turn.tool_calls):
            t = time.perf_counter()
            if call["name"] is None:
                content, err = f"Error: could not parse the tool call: {call['arguments'][:200]}", "invalid_tool_call"
            else:
                content, err = await call_tool(env, call["name"], call["arguments"])
            tool_s += time.perf_counter() - t
            n_tool_calls += 1
            if err:
                tool_errors[err] = tool_errors.get(err, 0) + 1
            tool_msg = {"role": "tool", "tool_call_id": call["id"] or f"call_{turn_no}_{i}",
                        "name": call["name"] or "", "content": content}
            if err:
                tool_msg["error"] = err
            messages.append(tool_msg)
    final = (messages[-1] if finish != "length" and messages[-1]["role"] == "assistant"
             and not messages[-1].get("tool_calls") else None)
    prediction = extract_answer(final["content"]) if final else None
    metrics = await score_episode(task, prediction, row, env)
    notes = env._score_notes() if hasattr(env, "_score_notes") else {}
    return {
        "id": row["id"],
        "env": task.name,
        "model": getattr(policy, "model", None),
        "policy": policy.kind,
        "question": row["question"],
        "golden_answers": row.get("golden_answers", []),
        "messages": messages,
        "tools": tools,
        "prediction": prediction,
        "metrics": metrics,
        "usage": usage_summary(per_turn, n_tool_calls, tool_errors, reasoning_chars(messages)),
        "finish": finish,
        "error": None,
        "timing": {"started": round(started, 3), "seconds": round(time.time() - started, 4),
                   "llm_seconds": round(llm_s, 4), "tool_seconds": round(tool_s, 4)},
        "metadata": {**{k: v for k, v in (row.get("metadata") or {}).items() if k not in HEAVY_METADATA}, **notes},
    }


async def score_episode(task, prediction: str | None, row: dict, env) -> dict:
    """Return the task's metrics for the episode, computed in a worker thread inside the item's timeout scope:
    scoring may run statements (the SQL env replays writes, re-runs queries, runs the gold statement on a server),
    which must neither block the other episodes' event loop nor outlive an item timeout. A cancellation interrupts
    the env and waits for the thread, as a tool call's does (agentrl.envs.base.call_tool)."""
    return await _in_thread(env, lambda: task.score(prediction, row, env), {})




def error_trajectory(policy, task, row: dict, error: str, started: float, kind: str = "internal") -> dict:
    """Return the record of an item that failed (policy error, timeout, ...): no messages, zero metrics, the
    readable ``error`` message and its ``error_kind``."""
    try:
        metrics = task.score(None, row, None)
    except Exception:  # noqa: BLE001 - a scorer that needs the env still yields a record
        metrics = {}
    return {
        "id": row["id"], "env": task.name, "model": getattr(policy, "model", None), "policy": policy.kind,
        "question": row["question"], "golden_answers": row.get("golden_answers", []), "messages": [], "tools": [],
        "prediction": None, "metrics": metrics, "usage": usage_summary([], 0, {}),
        "finish": "error", "error": error, "error_kind": kind,
        "timing": {"started": round(started, 3), "seconds": round(time.time() - started, 4)},
        "metadata": {k: v for k, v in (row.get("metadata") or {}).items() if k not in HEAVY_METADATA},
    }
