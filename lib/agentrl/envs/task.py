"""What an environment reads and what it builds for a run: its settings (:class:`EnvSettings`) and its :class:`Task`.

Every environment's settings are a dataclass that extends :class:`EnvSettings` with its own fields (the search
environment's ``top_k`` and QA file, the SQL environment's backend and scoring, ...) and its split sizes. A preset
gives them per run, in a table named after the environment inside the run's table (``[eval.search]``,
``[grpo.sql]``); nothing else carries an environment's knobs. ``build(settings, preset)`` returns the Task: the
environment factory, the system prompt, the oracle's plan and the scorer that the agent loop, the batch runner, SFT
export and GRPO share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.core.validate import AtLeast1, Finite, Moved
from agentrl.envs.base import instrumented


@dataclass
class EnvSettings:
    """What every environment reads: the prompt, the evaluation budget of an episode (turns, tokens per turn), its
    tool-call budget, and (GRPO) the rewards that train it. (GRPO's rollouts take their budget from TRL's
    ``max_tool_calling_iterations`` and ``max_completion_length``; the evaluation budget is the agent loop's.)"""

    prompt: str | None = None  # a prompt name of the env (its README lists them) or the text itself; default its own
    # the evaluation budget, read by every path that evaluates the environment (agentrl eval, GRPO's held-out
    # evaluations, SFT's check, sampling's turns) from the preset's [eval.<env>] table: assistant turns an episode may
    # take and tokens an assistant turn may generate (None: the environment's own)
    max_turns: AtLeast1 | None = None
    max_new_tokens: AtLeast1 | None = None
    max_tool_calls: AtLeast1 | None = None  # tool calls an episode may make (None: the environment's own budget)
    # GRPO only ([grpo.<env>]): reward name -> weight; empty = the environment's declared defaults (its README)
    rewards: dict[str, Finite] = field(default_factory=dict)
    moved: dict = field(default_factory=dict, metadata={"extra": Moved({"max_searches": "max_tool_calls"})})


@dataclass
class Task:
    """Everything the agent loop needs to know about a family of tasks, built by its environment."""

    name: str
    make_env: Callable[[], Any]
    system_prompt: str
    oracle_plan: Callable[[dict], list] | None
    score: Callable[[str | None, dict, Any], dict]
    config: dict = field(default_factory=dict)
    families: tuple[str, ...] = ()  # the environments whose episodes it plays (a mixture's members; else its own)
    max_turns: int = 6  # an episode's turn budget (the settings' max_turns, else the environment's own)
    max_new_tokens: int | None = None  # tokens a turn may generate (None: the environment's; registry.build_task)

    def __post_init__(self):
        self.make_env = instrumented(self.make_env, self.name)
        self.families = self.families or (self.name,)
