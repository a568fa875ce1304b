"""GRPO reward functions: plain top-level functions with TRL's signature, weights live in the config.

    f(prompts, completions, completion_ids=None, **columns) -> list[float | None]

``completions[i]`` is the rollout's message list (assistant turns with ``tool_calls``, tool results, the final
answer); dataset columns such as ``golden_answers`` arrive as keyword lists, and ``environments`` holds the
episode's environment instances. ``None`` means "no opinion" (TRL ignores that function for the sample).

Example: gold ["Tim Burton"], final turn "It was <answer>Tim Burton</answer>" with one well-formed search ->
answer_f1 1.0, answer_em 1.0, format 1.0.
"""

from __future__ import annotations

import re

from agentrl.agent import extract_answer
from agentrl.metrics import answer_metrics

_TAG = re.compile(r"</?answer>", re.IGNORECASE)
FORMAT_ERRORS = ("{'error'", "Error: invalid", "Error: unknown", "Error: could not parse")


def final_text(completion) -> str:
    """Return the text of the last assistant turn of a completion (message list or plain string)."""
    if isinstance(completion, str):
        return completion
    for m in reversed(completion or []):
        if m.get("role") == "assistant":
            content = m.get("content")
            if isinstance(content, list):  # content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content or ""
    return ""


def _metric(name: str, completions, golden_answers) -> list[float]:
    golds = golden_answers or [[] for _ in completions]
    return [answer_metrics(extract_answer(final_text(c)), g or [])[name]
            for c, g in zip(completions, golds, strict=True)]


def answer_f1(prompts, completions, completion_ids=None, golden_answers=None, **kwargs) -> list[float]:
    """Token F1 of the final ``<answer>`` against the gold answers (0 without an answer)."""
    return _metric("f1", completions, golden_answers)


def answer_em(prompts, completions, completion_ids=None, golden_answers=None, **kwargs) -> list[float]:
    """Exact match of the final ``<answer>`` against the gold answers."""
    return _metric("em", completions, golden_answers)


def format_reward(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """0.5 for tool use in the right form (at least one call, every call parsed: none left as raw
    ``<tool_call>`` text or answered with a format error) + 0.5 for a final turn with exactly one non-empty
    ``<answer>...</answer>``. Not calling tools earns nothing for the first half: an agent that stops searching
    must not look well-formed."""
    scores = []
    for c in completions:
        messages = c if isinstance(c, list) else [{"role": "assistant", "content": c}]
        said = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        heard = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
        # a call left as raw text was not parsed; a tool error about the call itself means a malformed call
        calls_ok = bool(heard) and not any("<tool_call>" in s for s in said) \
            and not any(h.startswith(FORMAT_ERRORS) for h in heard)
        text = final_text(c)
        answer_ok = len(_TAG.findall(text)) == 2 and extract_answer(text) is not None and bool(extract_answer(text))
        scores.append(0.5 * calls_ok + 0.5 * answer_ok)
    return scores


def tool_use(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """1.0 when the rollout made at least one successful tool call (a shaping reward for cold starts)."""
    out = []
    for c in completions:
        tools = [m for m in c if m.get("role") == "tool"] if isinstance(c, list) else []
        ok = [m for m in tools if not str(m.get("content") or "").startswith(("{'error'", "Error:"))]
        out.append(1.0 if ok else 0.0)
    return out


def _sql_metric(key: str, completions, environments) -> list[float | None]:
    from agentrl.envs.sql import SQLEnv, sql_score

    envs = environments or [None] * len(completions)
    return [sql_score(extract_answer(final_text(c)), None, env)[key] if isinstance(env, SQLEnv) else None
            for c, env in zip(completions, envs, strict=True)]


def sql_execution(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float | None]:
    """Execution match of each SQL episode (its ``exec``), judged on what the statements did, not on the <answer>:
    1.0 when a SELECT read exactly the label values from the task's table and that result depends on the table's
    data (re-run on perturbed copies of the initial table it changes: a literal such as ``SELECT 'Paris' FROM t``
    earns nothing, nor does an answer written into the table and read back), or, for INSERT/UPDATE/DELETE, when
    the final table equals what the gold statement makes of a fresh copy. Otherwise the configured partial credit
    (default 0.1): on a SELECT task for any statement that read the task's table, on a write task only when the
    final table is closer to the gold one than the initial table was (multiset Jaccard; ``DELETE FROM t`` earns
    nothing); with the Jaccard option, the overlap (SELECT) or the progress toward the gold table (writes) when
    larger. 0.0 otherwise. Transaction control is refused, so a rolled-back write is never counted. None outside
    the SQL environment."""
    return _sql_metric("exec", completions, environments)


def sql_answer(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float | None]:
    """The SQL episode's headline 0/1 match (its ``em``). Under the default ``agentbench`` scoring, AgentBench's
    verdict (agentrl.envs.agentbench): SELECT tasks, the ``<answer>`` against the label by ``compare_results``
    (MySQL-result-shaped answers parsed, values normalised, case-sensitive, floats within 1e-2, set equality for
    several values); INSERT/UPDATE/DELETE, AgentBench's hash of the final table against ``answer_md5`` (or the gold
    statement's hash when the task has none). Under ``lenient`` scoring, the answer values equal the label on
    normalised values (SELECT), or the final table equals the gold one (writes). 0.0 for a task whose gold
    statement fails (``unscorable``). None outside the SQL environment."""
    return _sql_metric("em", completions, environments)


def make_judge_reward(judge):
    """Return an async reward ``judge(prompts, completions, question, golden_answers)`` backed by an LLMJudge:
    batched, cached, retried; empty or unparseable replies fall back (recorded, logged as judge/fallback_share)
    instead of failing the step, while an endpoint that refuses the run (401/403/404) stops training."""

    async def judge_reward(prompts, completions, completion_ids=None, golden_answers=None, question=None,
                           **kwargs) -> list[float]:
        questions = question or [_question(p) for p in prompts]
        items = [(q, g or [], extract_answer(final_text(c)))
                 for q, g, c in zip(questions, golden_answers or [[]] * len(completions), completions, strict=True)]
        results = await judge.judge_many(items)
        if "log_metric" in kwargs:
            kwargs["log_metric"]("judge/fallback_share", sum(r["status"] == "fallback" for r in results) / len(results))
        return [float(r["correct"]) for r in results]

    judge_reward.__name__ = "judge"
    return judge_reward


def _question(prompt) -> str:
    if isinstance(prompt, list):
        return next((m.get("content", "") for m in reversed(prompt) if m.get("role") == "user"), "")
    return str(prompt)


def task_success(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float | None]:
    """Mixed-task GRPO: the row family's headline success (game solved, math-verify match, tests passed, SQL
    match), with each family's mean reward and success logged separately (agentrl.envs.mixed)."""
    from agentrl.envs.mixed import task_success as mixed_success

    return mixed_success(prompts, completions, completion_ids, environments=environments, **kwargs)


REWARDS = {"answer_f1": answer_f1, "answer_em": answer_em, "format": format_reward, "tool_use": tool_use,
           "sql_execution": sql_execution, "sql_answer": sql_answer, "task_success": task_success}
