"""``agentrl mcp-tasks``: a task file for an MCP server written from its tool list, as OpenPipe ART's MCP-RL does.

An OpenAI-compatible endpoint is shown the server's tools (the definitions the agent will see) and asked for tasks
that need them, answerable with a short text and changing nothing. Each task is then answered twice by the same
endpoint through the agent loop with the server's tools (the mcp environment's episodes); a task is kept when both
answers are there and agree after normalisation, with that answer as its gold. Nothing is written until every task
has been tried (the file appears whole or not at all).
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from agentrl import envs
from agentrl.core.chat import extract_answer
from agentrl.core.io import DataError
from agentrl.core.metrics import normalize_answer
from agentrl.envs import registry
from agentrl.envs.base import tool_schemas
from agentrl.rollout.agent import run_episode

WRITER = (
    "You write tasks for an AI agent that can call the tools below. Write {n} different tasks. Each task must need at "
    "least one of the tools, have one short answer (a name, a number, a phrase) that the tools' results determine, "
    "and must not ask the agent to create, change or delete anything. Reply with one JSON object per line, "
    "{{\"question\": \"...\"}}, and nothing else.\n\nTools:\n{tools}"
)


def parse_questions(text: str | None) -> tuple[list[str], int]:
    """Return ``(questions, unreadable)`` from a writer's reply: one JSON object (``{"question": ...}``) per line or
    a JSON list of them; ``unreadable`` counts lines that are neither (blank lines and code fences aside)."""
    text = (text or "").strip()
    try:
        whole = json.loads(text)
        items = whole if isinstance(whole, list) else [whole]
        lines = None
    except json.JSONDecodeError:
        items, lines = [], [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("```")]
    bad = 0
    for line in lines or []:
        try:
            items.append(json.loads(line.rstrip(",")))
        except json.JSONDecodeError:
            bad += 1
    questions = []
    for item in items:
        q = item.get("question") if isinstance(item, dict) else None
        if isinstance(q, str) and q.strip() and q.strip() not in questions:
            questions.append(q.strip())
        elif not isinstance(q, str):
            bad += 1
    return questions, bad


def task_id(question: str) -> str:
    """Return a stable id for a synthesised task (its question's hash)."""
    return "mcp_" + hashlib.sha1(question.encode("utf-8")).hexdigest()[:12]


async def synthesize(settings, policy, n: int, *, attempts: int = 2, concurrency: int = 8) -> tuple[list[dict], dict]:
    """Return ``(rows, report)``: up to ``n`` tasks for the server ``settings`` (MCPSettings) names, written by
    ``policy`` (an endpoint policy) and kept when ``attempts`` answers through the agent loop agree."""
    if n < 1 or attempts < 2:
        raise DataError(f"mcp-tasks: --n must be at least 1 and --attempts at least 2 (got {n}, {attempts})")
    task = registry.build_task(registry.get(envs.MCP), settings, {})
    probe = task.make_env()
    tools = [s["function"] for s in tool_schemas(probe)]
    probe._close()
    listing = json.dumps([{k: t[k] for k in ("name", "description", "parameters") if k in t} for t in tools], indent=1)
    turn = await policy.generate([{"role": "system", "content": WRITER.format(n=n, tools=listing)},
                                  {"role": "user", "content": f"Write {n} tasks."}], [])
    questions, unreadable = parse_questions(turn.content)
    questions = questions[:n]
    if not questions:
        raise DataError(f"mcp-tasks: the endpoint wrote no readable task ({unreadable} unreadable lines): "
                        f"{(turn.content or '')[:300]!r}")
    limit = asyncio.Semaphore(concurrency)

    async def answer(question: str) -> str | None:
        async with limit:
            trajectory = await run_episode(policy, task, {"id": task_id(question), "question": question,
                                                          "golden_answers": []}, max_turns=task.max_turns)
        return trajectory.get("prediction") or extract_answer(_final(trajectory))

    answers = await asyncio.gather(*(answer(q) for q in questions for _ in range(attempts)))
    rows, report = [], {"written": len(questions), "unreadable": unreadable, "no_answer": 0, "disagreed": 0}
    for i, question in enumerate(questions):
        got = answers[i * attempts:(i + 1) * attempts]
        if any(not a for a in got):
            report["no_answer"] += 1
        elif len({normalize_answer(a) for a in got}) > 1:
            report["disagreed"] += 1
        else:
            rows.append({"id": task_id(question), "question": question, "golden_answers": [got[0].strip()]})
    report["kept"] = len(rows)
    return rows, report


def _final(trajectory: dict) -> str | None:
    last = next((m for m in reversed(trajectory.get("messages") or []) if m.get("role") == "assistant"), None)
    return (last or {}).get("content")
