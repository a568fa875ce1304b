"""GRPO reward functions: plain top-level functions with TRL's signature, weights live in the config.

    f(prompts, completions, completion_ids=None, **columns) -> list[float | None]

``completions[i]`` is the rollout's message list (assistant turns with ``tool_calls``, tool results, the final
answer); dataset columns such as ``golden_answers`` arrive as keyword lists, and ``environments`` holds the
episode's environment instances (TRL passes them; the env-scored rewards read the episode's state from them).
``None`` means "no opinion" (TRL ignores that function for the sample).

Per environment: search ``answer_f1``/``answer_em``; SQL ``sql_execution``/``sql_answer``; text game
``game_score``; math ``math_correct`` (or ``judge``); code ``code_pass``; any env and mixed runs
``task_success``. ENV_REWARDS are the defaults when a GRPO run configures none.

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
    return _family_metric("sql", key, completions, environments, None)  # SQL episodes are scored on their state


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


def _families() -> tuple:
    from agentrl.envs.code import CodeEnv
    from agentrl.envs.math import MathEnv
    from agentrl.envs.mixed import MixedEnv
    from agentrl.envs.search import SearchEnv
    from agentrl.envs.sql import SQLEnv
    from agentrl.envs.textgame import TextGameEnv

    return ((MixedEnv, "mixed"), (TextGameEnv, "textgame"), (MathEnv, "math"), (CodeEnv, "code"), (SQLEnv, "sql"),
            (SearchEnv, "search"))


def episode_metrics(completion, env, golden_answers=None) -> tuple[str | None, dict | None]:
    """Return ``(family, metrics)`` of the episode ``env`` ran for ``completion``, scored by the family's own
    scorer (the evaluation's: game state, math-verify, the tests in the sandbox, the SQL result, answer match);
    a mixed-task env gives its row's family. ``(None, None)`` when ``env`` is None or of no known family."""
    family = None if env is None else next((name for cls, name in _families() if isinstance(env, cls)), None)
    if family is None:
        return None, None
    prediction = extract_answer(final_text(completion))
    row = {"golden_answers": golden_answers}
    if family == "mixed":
        from agentrl.envs.mixed import mixed_score

        inner = env._family
        return inner, (mixed_score(prediction, {**row, "env": inner}, env) if inner else None)
    if family == "search":
        return family, answer_metrics(prediction, golden_answers)
    from agentrl.envs.code import code_score
    from agentrl.envs.math import math_score
    from agentrl.envs.sql import sql_score
    from agentrl.envs.textgame import textgame_score

    score = {"textgame": textgame_score, "math": math_score, "code": code_score, "sql": sql_score}[family]
    return family, score(prediction, row, env)


def _family_metric(family: str | None, key: str, completions, environments, golden_answers) -> list[float | None]:
    envs = environments or [None] * len(completions)
    golds = golden_answers or [None] * len(completions)
    out: list[float | None] = []
    for c, env, gold in zip(completions, envs, golds, strict=True):
        got, metrics = episode_metrics(c, env, gold)
        out.append(float(metrics[key]) if metrics is not None and family in (None, got) else None)
    return out


def game_score(prompts, completions, completion_ids=None, environments=None, golden_answers=None,
               **kwargs) -> list[float | None]:
    """The text game's own score in [0, 1] at the end of the episode: each object put where it belongs counts,
    1.0 when the game reports the task solved. Answering ``<answer>done</answer>`` without playing earns 0.
    None outside text games (a mixed run's other rows)."""
    return _family_metric("textgame", "score", completions, environments, golden_answers)


def math_correct(prompts, completions, completion_ids=None, environments=None, golden_answers=None,
                 **kwargs) -> list[float | None]:
    """1.0 when the final ``<answer>`` equals the gold number by math-verify (``72``, ``72.0``, ``$72$``,
    ``\\boxed{72}``), else 0.0; None outside math episodes. An LLM judge instead: reward ``judge`` with a
    ``[grpo.judge]`` table (``fallback = "math_verify"``)."""
    return _family_metric("math", "correct", completions, environments, golden_answers)


def code_pass(prompts, completions, completion_ids=None, environments=None, golden_answers=None,
              **kwargs) -> list[float | None]:
    """pass@1: 1.0 when the final ``<answer>`` (the complete function) passes the problem's tests in the
    sandbox, else 0.0 (no answer, a failing test, a timeout); None outside code episodes."""
    return _family_metric("code", "passed", completions, environments, golden_answers)


def task_success(prompts, completions, completion_ids=None, environments=None, golden_answers=None,
                 **kwargs) -> list[float | None]:
    """The episode's headline success in any environment (its ``em``): game solved, math-verify match, tests
    passed, SQL answer/state match, answer exact match for search; in a mixed run, the row's family's. The
    per-family reward and success of a mixed run are logged by the trainer (agentrl.train.grpo)."""
    return _family_metric(None, "em", completions, environments, golden_answers)


REWARDS = {"answer_f1": answer_f1, "answer_em": answer_em, "format": format_reward, "tool_use": tool_use,
           "sql_execution": sql_execution, "sql_answer": sql_answer, "game_score": game_score,
           "math_correct": math_correct, "code_pass": code_pass, "task_success": task_success}

# GRPO rewards when a run configures none: the env's own measure of success, plus a little for the format
ENV_REWARDS = {"search": {"answer_f1": 1.0, "format": 0.1}, "sql": {"sql_execution": 1.0, "format": 0.1},
               "textgame": {"game_score": 1.0, "format": 0.1}, "math": {"math_correct": 1.0, "format": 0.1},
               "code": {"code_pass": 1.0, "format": 0.1}, "mixed": {"task_success": 1.0, "format": 0.1}}
# rewards that score one family's episodes only (None elsewhere)
FAMILY_REWARDS = {"sql_execution": "sql", "sql_answer": "sql", "game_score": "textgame", "math_correct": "math",
                  "code_pass": "code"}
# rewards on the answer text against golden_answers: meaningless where the gold is not the answer (a game's
# "done" earns full F1 without playing; code's gold is one of many correct functions)
ANSWER_REWARDS = {"answer_f1", "answer_em", "judge"}


def reward_misfit(name: str, families) -> str | None:
    """Return why reward ``name`` cannot train episodes of ``families`` (one env, or a mixture's), else None."""
    families = set(families)
    if name in FAMILY_REWARDS and FAMILY_REWARDS[name] not in families:
        return f"{name} scores {FAMILY_REWARDS[name]} episodes only"
    if name in ANSWER_REWARDS and families & {"textgame", "code"}:
        return (f"{name} compares the answer text with golden_answers, which a text game ('done') or a code "
                "problem does not score; use game_score, code_pass or task_success")
    return None
