"""search: multi-hop QA over a passage corpus with one tool, ``search(query)`` (README.md beside this file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, AtLeast1, file_or
from agentrl.data.corpus import DEFAULT_QA, load_qa
from agentrl.envs.registry import Environment
from agentrl.envs.search.env import backend_for, search_score, search_task
from agentrl.envs.task import EnvSettings

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
MAX_SEARCHES = 4  # the tool-call budget when the settings give none


@dataclass
class SearchSettings(EnvSettings):
    """The search environment's settings ([eval.search], [grpo.search]): the QA file and its splits, the retriever
    and what a search returns."""

    qa: file_or("hf:") | None = None  # the QA file (FlashRAG layout); default the preset's [corpus] qa
    train: AtLeast1 | None = None  # training questions, from the first (None: every one before validation and heldout)
    validation: AtLeast0 = 0  # the questions right before the held-out ones: hyperparameters are chosen on them
    heldout: AtLeast0 = 50  # the last questions of the file: what runs report on, never trained on
    top_k: AtLeast1 = 3  # passages per search
    search_method: Literal["bm25", "dense", "hybrid"] | None = None  # default: the index's
    raw_chunks: bool = False  # raw chunks instead of the top_k distinct documents
    passage_chars: AtLeast1 | None = None  # cut each passage to this many characters
    max_query_chars: AtLeast1 | None = None  # longer queries are a tool error; default 2,000
    index: str | None = None  # index directory; default the preset's phase-00 index
    mcp_url: str | None = None  # a remote MCP retrieval server instead of a local index


def qa_file(settings: SearchSettings, preset: dict | None, source: str | None = None) -> str:
    """Return the QA file the search rows come from: ``source``, else the settings' ``qa``, else the preset's
    ``[corpus] qa`` (its default, the bundled HotpotQA sample, when the preset has no such key)."""
    corpus = (preset or {}).get("corpus") or {}
    qa = source or settings.qa or corpus.get("qa", DEFAULT_QA)
    if not qa:
        raise DataError("the search environment has no QA file: the preset's [corpus] qa is \"\" (its corpus comes "
                        "from corpus_file); set qa in its [eval.search] / [grpo.search] table")
    return qa


def build(settings: SearchSettings, preset: dict | None = None):
    """Return the search Task for ``settings`` over the index (or MCP server) they name."""
    return search_task(backend_for(settings, preset), top_k=settings.top_k,
                       max_searches=MAX_SEARCHES if settings.max_tool_calls is None else settings.max_tool_calls,
                       prompt=settings.prompt, passage_chars=settings.passage_chars,
                       max_query_chars=settings.max_query_chars, max_turns=settings.max_turns or ENVIRONMENT.max_turns)


def rows(split: str, settings: SearchSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return the QA file's rows of ``split``: ``heldout`` the last ``heldout`` questions, ``validation`` the
    ``validation`` before them, ``train`` the rest (the first ``train`` of them when set), ``all`` every row."""
    found = load_qa(qa_file(settings, preset, source))
    n = len(found)
    held = min(max(0, settings.heldout), n)
    val = min(max(0, settings.validation), n - held)
    cut = {"heldout": (n - held, n), "validation": (n - held - val, n - held), "all": (0, n),
           "train": (0, n - held - val if settings.train is None else min(settings.train, n - held - val))}[split]
    return found[cut[0]:cut[1]]


def score(prediction, row, env) -> dict:
    """Return the answer metrics and ``grounded`` (agentrl.envs.search.env.search_score)."""
    return search_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="search", summary="multi-hop QA over a corpus with a hybrid-retrieval search tool", build=build, rows=rows,
    settings=SearchSettings, env_class="agentrl.envs.search.env:SearchEnv", score=score, prompts=PROMPTS,
    rewards={"answer_f1": 1.0, "format": 0.1}, metrics=("f1", "grounded"), eval_split="all", folder=__name__,
    mixture_note=(" For a question about the world, look up facts with the `search` tool and reply with a short "
                  "answer inside <answer></answer> tags."))
