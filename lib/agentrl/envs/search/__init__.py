"""search: multi-hop QA over a passage corpus with one tool, ``search(query)`` (README.md beside this file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

HELDOUT = 50  # a training run holds out the last 50 questions of its QA file (a mixture's search rows)

PROMPTS = {
    "search": (
        "You answer questions by searching a knowledge base with the `search` tool.\n"
        "Search for the entities in the question. If the passages do not contain what you need, refine the "
        "query (a different name, a more specific phrase) and search again; multi-hop questions need one "
        "search per hop. Use at most {max_searches} searches.\n"
        "When you know the answer, reply with the short answer only (a name, date, number or yes/no) inside "
        "<answer></answer> tags, for example <answer>Tim Burton</answer>."
    ),
    "search_brief": (
        "Use the search tool to find the answer, then reply with <answer>short answer</answer>."
    ),
    # the seed's MultiHop-RAG-NoThink semantics (DeepSearch-RL): passages only, decide after each search, refine
    # the queries when the passages fall short, a one-entity answer, "Insufficient Information" when not found
    "search_nothink": (
        "You answer questions with the `search` tool, using only the passages it returns; check your answer "
        "against their text.\n"
        "After each search, decide whether the passages are enough. If they are, reply with the answer inside "
        "<answer></answer> tags; keep it as short as possible: one word or one entity. If they are not, write "
        "sharper search queries and search again, at most {max_searches} searches in all.\n"
        "If the passages never contain the answer, reply <answer>Insufficient Information</answer>."
    ),
}


def build(settings, preset: dict | None = None):
    """Return the search Task for ``settings`` over the index (or MCP server) they name."""
    from agentrl.envs.search.env import backend_for, search_task

    return search_task(backend_for(settings, preset), top_k=settings.top_k, max_searches=settings.max_searches,
                       prompt=settings.prompt, passage_chars=settings.passage_chars,
                       max_query_chars=settings.max_query_chars)


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """Return QA rows from ``source`` (default the preset's QA file: ``[eval].qa``, else ``[corpus].qa``): every row
    for ``train`` and ``eval`` (a GRPO run holds out the slice after its training questions), the last HELDOUT
    for ``heldout``."""
    from agentrl.data.corpus import load_qa
    from agentrl.data.pipeline import eval_qa_path

    found = load_qa(source or eval_qa_path(preset or {}))
    return found[-HELDOUT:] if split == "heldout" else found


def score(prediction, row, env) -> dict:
    """Return the answer metrics and ``grounded`` (agentrl.envs.search.env.search_score)."""
    from agentrl.envs.search.env import search_score

    return search_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="search", summary="multi-hop QA over a corpus with a hybrid-retrieval search tool", build=build, rows=rows,
    env_class="agentrl.envs.search.env:SearchEnv", score=score, prompts=PROMPTS,
    rewards={"answer_f1": 1.0, "format": 0.1}, metrics=("f1", "grounded"), row_metadata=False, folder=__name__,
    mixture_note=(" For a question about the world, look up facts with the `search` tool and reply with a short "
                  "answer inside <answer></answer> tags."))
