"""Mixed-task environment: one GRPO run over several task families, each row routed to its own environment.

Sample mixture (``[grpo] mixture = {math = 0.25, code = 0.25, textgame = 0.25, search = 0.25}``, 8 rows): 2
GSM8K problems, 2 HumanEval problems, 2 text games and 2 HotpotQA questions, interleaved; each row carries
``env`` (its family) and ``task`` (its metadata as JSON). TRL gives one tool list to the whole run, so the
environment offers the union of the families' tools (``act``, ``calculator``, ``execute_sql``, ``run_python``,
``search``); a tool that does not belong to the row's family answers with an error naming the family's own tools.
Search rows need the preset's index (its retriever is loaded once and shared by every episode).

Training rows come from training items only (train-fold games, GSM8K's first 100 training problems, the head of
HumanEval, synthetic SQL tables, the head of the QA file), held-out rows from evaluation items (dev-fold games,
the GSM8K held-out slice, the tail of HumanEval, DB Bench dev tasks, the tail of the QA file).

Metrics: each family's own (see its module); the ``task_success`` reward (agentrl.rewards) is the family's
headline success (``em``: game solved, math-verify match, tests passed, SQL answer/state match, answer match),
and the trainer logs each family's weighted total reward and headline success as ``<family>/reward`` and
``<family>/success`` (agentrl.train.grpo).
"""

from __future__ import annotations

import json
import random

FAMILIES = ("textgame", "math", "code", "sql", "search")
MATH_TRAIN, MATH_HELDOUT = "data/samples/gsm8k_train_100.jsonl", "data/samples/gsm8k_heldout_200.jsonl"
# added to the mixed prompt when search rows take part (not in agentrl.prompts.PROMPTS: the tiny model's tokenizer
# is trained on those texts, and a changed vocabulary changes every tiny-model result)
SEARCH_PROMPT = (" For a question about the world, look up facts with the `search` tool and reply with a short "
                 "answer inside <answer></answer> tags.")
CODE_TRAIN = 100  # HumanEval/0..99 train a mixture, HumanEval/100..163 are its held-out problems
QA_HELDOUT = 50  # the last 50 rows of the preset's QA file are search's held-out questions


def family_task(name: str):
    """Return the Task of one family (the evaluation's builders, default settings). Search needs a retriever:
    its Task comes from :func:`search_family`, given to :func:`mixed_task`."""
    from agentrl import tasks

    builders = {"textgame": tasks.textgame_task, "math": tasks.math_task, "code": tasks.code_task,
                "sql": tasks.sql_task}
    if name == "search":
        raise ValueError("mixture: search rows need the preset's index; build the task with "
                         "mixed_task({'search': search_family(...)})")
    if name not in builders:
        raise ValueError(f"mixture: unknown task family '{name}' (choose from {', '.join(FAMILIES)})")
    return builders[name]()


def search_family(cfg, preset: dict):
    """Return the search Task of a mixture over the preset's index (``cfg``: an EvalConfig for env search);
    DataError naming the commands that build the index when it does not exist."""
    from pathlib import Path

    from agentrl.evaluate import build_task
    from agentrl.io import DataError
    from agentrl.pipeline import corpus_paths

    index = Path(cfg.index) if cfg.index else corpus_paths(preset)[1]
    if not cfg.mcp_url and not (index / "index.json").is_file():
        raise DataError(f"grpo.mixture has search but the preset's index {index} does not exist; build it first "
                        f"(`agentrl corpus --config NAME` then `agentrl index --corpus {index.parent} --config NAME`, "
                        "or `agentrl demo`)")
    return build_task(cfg, preset)


class MixedEnv:
    """Routes each episode to the environment of its row's family (one instance per family, reused);
    ``tasks`` gives the Tasks of families that need more than defaults (search: the preset's retriever)."""

    def __init__(self, tasks: dict | None = None):
        self._tasks = dict(tasks or {})
        self._envs: dict = {}
        self._family: str | None = None

    def reset(self, **row) -> None:
        """Start an episode in the environment of ``row["env"]``."""
        family = row.get("env")
        if family not in FAMILIES:
            raise ValueError(f"mixed-task row {row.get('id')!r} has env {family!r}, not one of {FAMILIES}")
        if family not in self._envs:
            task = self._tasks.get(family) or family_task(family)
            self._envs[family] = task.make_env()
        self._family = family
        self._envs[family].reset(**row)

    def _interrupt(self) -> None:
        """Stop the current family's tool call in progress (see envs.base.call_tool)."""
        interrupt = getattr(self._envs.get(self._family), "_interrupt", None)
        if interrupt is not None:
            interrupt()

    def _close(self) -> None:
        """Release every family environment's episode resources."""
        for env in self._envs.values():
            close = getattr(env, "_close", None)
            if close is not None:
                close()

    def _tool(self, name: str):
        env = self._envs.get(self._family)
        fn = getattr(env, name, None) if env is not None else None
        if fn is None:
            from agentrl.envs.base import tool_methods

            own = ", ".join(sorted(tool_methods(env))) if env is not None else "none"
            raise RuntimeError(f"the {name} tool is not part of this {self._family} task; its tools: {own}")
        return fn

    def act(self, command: str) -> str:
        """Perform one action in the text game and return what happens, the score and the valid actions.

        Args:
            command: One action, for example "open wardrobe" or "put clean gray blazer in wardrobe".
        """
        return self._tool("act")(command)

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, for example "(48 + 24) * 2 / 3".
        """
        return self._tool("calculator")(expression)

    def execute_sql(self, query: str) -> str:
        """Run one SQL statement on the database and return the result as a small text table.

        Args:
            query: A single SQLite statement. Quote table and column names that contain spaces with double quotes.
        """
        return self._tool("execute_sql")(query)

    def run_python(self, code: str) -> str:
        """Run a Python program in a sandbox and return its exit status, stdout and stderr.

        Args:
            code: A complete Python program (standard library only; no network, no files outside its temp dir).
        """
        return self._tool("run_python")(code)

    async def search(self, query: str) -> str:
        """Search the knowledge base and return the most relevant passages with their titles.

        Args:
            query: What to look for: keywords, a name or a short question.
        """
        return await self._tool("search")(query)


def mixed_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the metrics of the row's family for an episode of the mixed environment."""
    from agentrl.tasks import answer_score

    family = (row or {}).get("env") or (env._family if env is not None else None)
    inner = env._envs.get(family) if env is not None else None
    score = answer_score if family == "search" else family_task(family).score
    return score(prediction, row or {}, inner)


def mixture_rows(mixture: dict[str, float], sources: dict[str, list[dict]], n: int, seed: int = 0) -> list[dict]:
    """Return ``n`` rows drawn from each family's rows in the configured proportions (largest remainders),
    shuffled with ``seed``; each row gains ``env`` and ``task`` (its metadata as JSON)."""
    total = sum(mixture.values())
    if total <= 0 or any(w < 0 for w in mixture.values()):
        raise ValueError("mixture proportions must be non-negative and not all zero")
    exact = {k: n * w / total for k, w in mixture.items()}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:n - sum(counts.values())]:
        counts[k] += 1
    rows = []
    for family, count in counts.items():
        pool = sources[family]
        if count > len(pool):
            raise ValueError(f"mixture wants {count} {family} rows but only {len(pool)} are available")
        rows += [{**r, "env": family, "task": json.dumps(r.get("metadata") or {})} for r in pool[:count]]
    random.Random(seed).shuffle(rows)
    return rows


def family_summary(families: list, rewards: list[float], successes: list) -> dict[str, float]:
    """Return ``{"<family>/reward": mean total reward, "<family>/success": mean headline success}`` over the
    rollouts of each family in a batch (rollouts without a reward, NaN, or without a success, None, left out)."""
    import math

    out: dict[str, float] = {}
    for family in sorted({f for f in families if f}):
        got = [r for f, r in zip(families, rewards, strict=True) if f == family and not math.isnan(r)]
        won = [float(s) for f, s in zip(families, successes, strict=True) if f == family and s is not None]
        if got:
            out[f"{family}/reward"] = sum(got) / len(got)
        if won:
            out[f"{family}/success"] = sum(won) / len(won)
    return out


def training_sources(families, n: int, preset: dict | None = None) -> dict[str, list[dict]]:
    """Return each family's training rows (``n`` generated text games from train-fold seeds; the others' whole
    training pools): GSM8K's first 100 training problems (disjoint from the held-out slice), HumanEval/0..99 (the
    only offline code set), synthetic SQL tables (DB Bench is evaluation only), the preset's QA file but its last
    QA_HELDOUT rows (search)."""
    return {family: _rows(family, n, preset or {}, held_out=False) for family in families}


def heldout_sources(families, n: int, preset: dict | None = None) -> dict[str, list[dict]]:
    """Return each family's held-out rows (``n`` generated dev-fold games; the others' whole evaluation pools),
    all items a mixture never trains on: the GSM8K held-out slice, HumanEval/100..163, DB Bench dev tasks, the
    last QA_HELDOUT rows of the preset's QA file."""
    return {family: _rows(family, n, preset or {}, held_out=True) for family in families}


def _rows(family: str, n: int, preset: dict, held_out: bool) -> list[dict]:
    if family == "textgame":
        from agentrl.envs.textgame import textgame_tasks

        return textgame_tasks("dev" if held_out else "train", n)
    if family == "math":
        from agentrl.envs.math import load_gsm8k

        return load_gsm8k(MATH_HELDOUT if held_out else MATH_TRAIN)
    if family == "code":
        from agentrl.envs.code import humaneval_tasks

        return humaneval_tasks()[CODE_TRAIN:] if held_out else humaneval_tasks()[:CODE_TRAIN]
    if family == "sql":
        if held_out:
            from agentrl.envs.sql import load_dbbench

            return load_dbbench("data/samples/dbbench_dev.jsonl")
        from agentrl.envs.sql_tasks import synthetic_sql_tasks

        return synthetic_sql_tasks()
    if family == "search":
        from agentrl.corpus import load_qa
        from agentrl.pipeline import eval_qa_path

        rows = load_qa(eval_qa_path(preset))
        return rows[-QA_HELDOUT:] if held_out else rows[:-QA_HELDOUT]
    raise ValueError(f"mixture: unknown task family '{family}' (choose from {', '.join(FAMILIES)})")


def mixed_task(tasks: dict | None = None):
    """Return the mixed Task: MixedEnv (with ``tasks``, e.g. ``{"search": search_family(...)}``), one prompt
    naming every family's tools, each row scored by its family."""
    import functools

    from agentrl.prompts import system_prompt
    from agentrl.tasks import Task

    tasks = dict(tasks or {})

    def plan(row: dict) -> list:
        return (tasks.get(row["env"]) or family_task(row["env"])).oracle_plan(row)

    prompt = system_prompt("mixed") + (SEARCH_PROMPT if "search" in tasks else "")
    return Task(name="mixed", make_env=functools.partial(MixedEnv, tasks), system_prompt=prompt,
                oracle_plan=plan, score=mixed_score, config={"families": list(FAMILIES), "given": sorted(tasks)})
