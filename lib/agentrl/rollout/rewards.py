"""GRPO reward functions: plain top-level functions with TRL's signature, weights live in the config.

    f(prompts, completions, completion_ids=None, **columns) -> list[float | None]

``completions[i]`` is the rollout's message list (assistant turns with ``tool_calls``, tool results, the final
answer); dataset columns such as ``golden_answers`` and ``env`` (the row's environment) arrive as keyword lists, and
``environments`` holds the episode's environment instances (TRL passes them; the env-scored rewards read the episode's
state from them). ``None`` means "no opinion" (TRL ignores that function for the sample).

The registry (:func:`reward_registry`) maps each configured name to its function, and each function's ``__name__``
is that name, which is what TRL logs (``rewards/<name>/mean``). Generic rewards are defined here (``answer_f1``,
``answer_em``, ``format``, ``tool_use``, ``task_success``, and ``judge`` from a ``[grpo.judge]`` table); an
environment's own rewards come from its declaration (agentrl.envs.registry: ``reward_metrics``, e.g. the SQL
environment's ``sql_execution`` pays its ``exec`` metric, and ``reward_functions``), and its default weights from its
``rewards``.

Example: gold ["Tim Burton"], final turn "It was <answer>Tim Burton</answer>" with one well-formed search ->
answer_f1 1.0, answer_em 1.0, format 1.0.
"""

from __future__ import annotations

import re

from agentrl.core.chat import extract_answer
from agentrl.core.metrics import answer_metrics
from agentrl.envs import registry
from agentrl.envs.base import FORMAT_ERRORS, active_env, tool_outcomes
from agentrl.envs.registry import env_name

_TAG = re.compile(r"</?answer>", re.IGNORECASE)


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


def format_reward(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float]:
    """0.5 for tool use in the right form (at least one call, every call parsed and well-formed: none left as raw
    ``<tool_call>`` text, none to an unknown tool or with arguments that do not fit) + 0.5 for a final turn with
    exactly one non-empty ``<answer>...</answer>``. A call the tool refused (a limit, a failed statement) or that
    crashed is well-formed: its content was wrong, not its form. Not calling tools earns nothing for the first half:
    an agent that stops searching must not look well-formed."""
    envs = environments or [None] * len(completions)
    scores = []
    for c, env in zip(completions, envs, strict=True):
        messages = c if isinstance(c, list) else [{"role": "assistant", "content": c}]
        said = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        outcomes = tool_outcomes(messages, env)
        calls_ok = bool(outcomes) and not any("<tool_call>" in str(s) for s in said) \
            and not any(kind in FORMAT_ERRORS for kind in outcomes)
        text = final_text(c)
        answer_ok = len(_TAG.findall(text)) == 2 and bool(extract_answer(text))
        scores.append(0.5 * calls_ok + 0.5 * answer_ok)
    return scores


format_reward.__name__ = "format"  # the configured name is the logged name


def tool_use(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float]:
    """1.0 when the rollout made at least one successful tool call: not malformed, not refused (a limit reached, a
    failed statement), not crashed (a shaping reward for cold starts)."""
    envs = environments or [None] * len(completions)
    return [1.0 if any(kind is None for kind in tool_outcomes(c, env)) else 0.0
            for c, env in zip(completions, envs, strict=True)]


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


def episode_metrics(completion, env, golden_answers=None, family: str | None = None) -> tuple[str | None, dict | None]:
    """Return ``(family, metrics)`` of the episode ``env`` ran for ``completion``, scored by its environment's own
    scorer (the evaluation's: game state, math-verify, the tests in the sandbox, the SQL result, answer match); a
    routing env's episode is its row's family's (``family``: the row's ``env`` column, else what ``env`` played).
    ``(None, None)`` when ``env`` is None or of no registered environment."""
    family = env_name(env) if family is None or env is None else family
    if env is None or family is None:
        return None, None
    prediction = extract_answer(final_text(completion))
    return family, registry.get(family).score(prediction, {"golden_answers": golden_answers}, active_env(env))


def _family_metric(family: str | None, key: str | None, completions, environments, golden_answers,
                   rows_env=None) -> list[float | None]:
    """Return the ``key`` metric (None: the environment's ``success`` metric) of each episode of ``family`` (None:
    any), None for the others."""
    envs = environments or [None] * len(completions)
    golds = golden_answers or [None] * len(completions)
    named = rows_env or [None] * len(completions)
    out: list[float | None] = []
    for c, env, gold, row_env in zip(completions, envs, golds, named, strict=True):
        got, metrics = episode_metrics(c, env, gold, row_env)
        if metrics is None or family not in (None, got):
            out.append(None)
        else:
            out.append(float(metrics[key or registry.get(got).success]))
    return out


def task_success(prompts, completions, completion_ids=None, environments=None, golden_answers=None, env=None,
                 **kwargs) -> list[float | None]:
    """The episode's headline success in any environment (its ``success`` metric: game solved, math-verify match,
    tests passed, SQL answer/state match, answer exact match for search); in a mixed run, the row's family's. The
    per-family reward and success of a mixed run are logged by the trainer (agentrl.train.grpo)."""
    return _family_metric(None, None, completions, environments, golden_answers, env)


def metric_reward(family: str, name: str, key: str):
    """Return the reward ``name``: the ``key`` metric of ``family``'s episodes, None for other environments'."""

    def reward(prompts, completions, completion_ids=None, environments=None, golden_answers=None, env=None,
               **kwargs) -> list[float | None]:
        return _family_metric(family, key, completions, environments, golden_answers, env)

    reward.__name__ = name
    reward.__qualname__ = name
    reward.__doc__ = (f"The {key} metric of a {family} episode, scored on the episode's state by the environment's "
                      f"scorer (agentrl/envs/{family}/README.md); None for other environments' episodes.")
    return reward


GENERIC = {"answer_f1": answer_f1, "answer_em": answer_em, "format": format_reward, "tool_use": tool_use,
           "task_success": task_success}
# rewards on the answer text against golden_answers: meaningless where the gold is not the answer (a game's
# "done" earns full F1 without playing; code's gold is one of many correct functions)
ANSWER_REWARDS = {"answer_f1", "answer_em", "judge"}


def reward_registry() -> dict:
    """Return every reward by its configured name: the generic ones and each registered environment's own (a
    function's ``__name__`` is its name). ``judge`` is built from a judge config (:func:`make_judge_reward`)."""
    out = dict(GENERIC)
    for family in registry.names():
        spec = registry.get(family)
        for name, key in spec.reward_metrics.items():
            out[name] = metric_reward(family, name, key)
        for name, fn in spec.reward_functions.items():
            if getattr(fn, "__name__", name) != name:
                fn.__name__ = name  # TRL logs the function's name: the configured name
            out[name] = fn
    return out


def default_rewards(env: str) -> dict[str, float]:
    """Return the rewards (and weights) GRPO trains ``env`` on when a run configures none: its declaration's."""
    return dict(registry.get(env).rewards)


def reward_misfit(name: str, families) -> str | None:
    """Return why reward ``name`` cannot train episodes of ``families`` (one env, or a mixture's), else None."""
    families = set(families)
    owner = registry.own_reward(name)
    if owner is not None and owner.name not in families:
        return f"{name} scores {owner.name} episodes only"
    blind = sorted(f for f in families if not registry.get(f).answer_scored)
    if name in ANSWER_REWARDS and blind:
        return (f"{name} compares the answer text with golden_answers, which {' and '.join(blind)} episodes do not "
                "score (a text game answers 'done', a code problem has many correct functions); use the environment's "
                "own reward or task_success")
    return None
