"""textgame: household text games (TextWorldExpress ``twc``) played with one tool, ``act(command)``, scored by the
game (README.md beside this file)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentrl.core.config import data_file
from agentrl.core.io import read_jsonl
from agentrl.core.validate import AtLeast0
from agentrl.envs import registry
from agentrl.envs.registry import Environment
from agentrl.envs.task import EnvSettings, Task
from agentrl.envs.textgame.env import FOLDS, TextGameEnv, oracle_plan, require_java, textgame_score, textgame_tasks

PROMPTS = {
    "textgame": (
        "You play a text game. Act in the world with the `act` tool, one command per call (for example "
        "\"open wardrobe\", \"take clean gray blazer\", \"put clean gray blazer in wardrobe\"); each result "
        "shows what happened, the score and the valid actions. Use at most {max_steps} actions.\n"
        "When the task is solved (or you give up), reply <answer>done</answer>."
    ),
}
SPLIT_FOLDS = {"train": "train", "validation": "test", "heldout": "dev"}  # the generator keeps the folds disjoint
MAX_STEPS = 50  # actions a game allows when the settings give no budget


@dataclass
class TextGameSettings(EnvSettings):
    """The text game's settings ([eval.textgame], [grpo.textgame]): how many games each split generates (train-fold
    seeds for training, test-fold seeds for validation, dev-fold seeds held out)."""

    train: AtLeast0 = 20  # training games (train-fold seeds train_from..)
    train_from: AtLeast0 = 0  # first training seed: GRPO on games an SFT run's demonstrations (seeds 0..) never showed
    validation: AtLeast0 = 0  # validation games (test-fold seeds 0..)
    heldout: AtLeast0 = 20  # held-out games (dev-fold seeds 0..)


def textgame_task(*, prompt: str | None = None, max_steps: int = MAX_STEPS, max_turns: int = 20):
    """Return the text-game Task over TextWorldExpress games from a per-process pool."""
    require_java()  # fail before the first item, naming the package to install
    prompt = prompt or "textgame"
    return Task(name=ENVIRONMENT.name, make_env=functools.partial(TextGameEnv, max_steps=max_steps),
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_steps=max_steps), oracle_plan=oracle_plan,
                score=textgame_score, config={"prompt": prompt, "max_steps": max_steps}, max_turns=max_turns)


def build(settings: TextGameSettings, preset: dict | None = None):
    """Return the text-game Task for ``settings`` (a game allows 50 actions unless max_tool_calls says otherwise)."""
    return textgame_task(prompt=settings.prompt,
                         max_steps=MAX_STEPS if settings.max_tool_calls is None else settings.max_tool_calls,
                         max_turns=settings.max_turns or ENVIRONMENT.max_turns)


def rows(split: str, settings: TextGameSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return generated games of ``split`` (``train`` train-fold seeds from ``train_from``, ``validation`` test-fold
    seeds from 0, ``heldout`` dev-fold seeds from 0, as many as the settings say; ``all`` every split's);
    ``source`` names a fold (train, dev, test: the split's number of its games, from seed 0) or a task-row JSONL file
    (its rows, whatever the split)."""
    if source is not None and source not in FOLDS:
        return read_jsonl(data_file(source), required=("id", "question", "metadata"))
    if split == "all":
        if source is not None:  # one fold: its games, once (as many as the largest split asks)
            return textgame_tasks(source, max(settings.train, settings.validation, settings.heldout))
        return [r for s in ("train", "validation", "heldout") for r in rows(s, settings, preset, source)]
    n = {"train": settings.train, "validation": settings.validation, "heldout": settings.heldout}[split]
    first = settings.train_from if split == "train" and source is None else 0
    return textgame_tasks(source or SPLIT_FOLDS[split], n, first_seed=first) if n else []


def score(prediction, row, env) -> dict:
    """Return the game's metrics of the episode (agentrl.envs.textgame.env.textgame_score)."""
    return textgame_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="textgame", summary="household text games (TextWorldExpress, JVM) with an act tool", build=build,
    env_class="agentrl.envs.textgame.env:TextGameEnv", rows=rows, score=score, settings=TextGameSettings,
    prompts=PROMPTS, rewards={"game_score": 1.0, "format": 0.1}, reward_metrics={"game_score": "score"},
    metrics=("score", "steps", "invalid_actions"), answer_scored=False, max_turns=20,
    max_new_tokens=64, demo_items=4, folder=__name__,
    near_copies=False)  # a game is its task and opening text; games of other folds share rooms, not objects
