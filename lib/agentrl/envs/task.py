"""What an environment builds for a run: the episode settings it reads and the Task it returns.

:class:`EpisodeSettings` are the knobs of an episode, defined once: the ``[eval]`` table takes them, and the
``[grpo]`` table too, where a key it does not set takes ``[eval]``'s value (the agent trains with the tools it is
evaluated with). An environment's ``build(settings, preset)`` returns a :class:`Task`: the environment factory, the
system prompt, the oracle's plan and the scorer that the agent loop, the batch runner, SFT export and GRPO share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EpisodeSettings:
    """How an episode runs, whichever environment reads it (each reads the keys that concern it; README.md in its
    folder says which)."""

    prompt: str | None = None  # a prompt name of the env (its README lists them) or the text itself; default its own
    top_k: int = 3  # search: passages per call
    search_method: str | None = None  # search: bm25 | dense | hybrid; default the index's
    raw_chunks: bool = False  # search: raw chunks instead of the top_k distinct documents
    max_searches: int = 4  # the tool-call budget: searches (search), statements (sql)
    passage_chars: int | None = None  # search: cut each passage to this many characters
    max_query_chars: int | None = None  # search: longer queries are a tool error; default 2,000
    index: str | None = None  # search: index directory; default the preset's phase-00 index
    mcp_url: str | None = None  # search: a remote MCP retrieval server instead of a local index
    sql_partial_credit: float = 0.1  # sql: exec score when statements ran but the result/final table is wrong
    sql_jaccard: bool = False  # sql: Jaccard overlap of rows as partial credit when larger than the above
    sql_scoring: str = "agentbench"  # sql headline em: AgentBench's rules, or "lenient" (normalised values)
    sql_backend: str = "sqlite"  # sql databases: sqlite (in-process, fast) or mariadb (a MySQL-compatible server)
    env_args: dict = field(default_factory=dict)  # keyword settings of a user's environment (its build reads them)


EPISODE_KEYS = tuple(f.name for f in dataclasses.fields(EpisodeSettings))


def episode_settings(settings: EpisodeSettings) -> EpisodeSettings:
    """Return the EpisodeSettings part of ``settings`` (an EvalConfig or GRPOSettings) as a plain copy."""
    return EpisodeSettings(**{k: getattr(settings, k) for k in EPISODE_KEYS})


@dataclass
class Task:
    """Everything the agent loop needs to know about a family of tasks, built by its environment."""

    name: str
    make_env: Callable[[], Any]
    system_prompt: str
    oracle_plan: Callable[[dict], list] | None
    score: Callable[[str | None, dict, Any], dict]
    config: dict = field(default_factory=dict)

    def __post_init__(self):
        from agentrl.envs.base import instrumented

        self.make_env = instrumented(self.make_env, self.name)
