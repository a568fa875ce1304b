"""textgame: household text games (TextWorldExpress ``twc``) played with one tool, ``act(command)``, scored by the
game (README.md beside this file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

PROMPTS = {
    "textgame": (
        "You play a text game. Act in the world with the `act` tool, one command per call (for example "
        "\"open wardrobe\", \"take clean gray blazer\", \"put clean gray blazer in wardrobe\"); each result "
        "shows what happened, the score and the valid actions. Use at most {max_steps} actions.\n"
        "When the task is solved (or you give up), reply <answer>done</answer>."
    ),
}
SPLIT_FOLDS = {"train": "train", "eval": "dev", "heldout": "dev"}  # the generator keeps the folds disjoint


def textgame_task(*, prompt: str | None = None, max_steps: int = 50):
    """Return the text-game Task over TextWorldExpress games from a per-process pool."""
    import functools

    from agentrl.envs import registry
    from agentrl.envs.task import Task
    from agentrl.envs.textgame.env import TextGameEnv, oracle_plan, require_java, textgame_score

    require_java()  # fail before the first item, naming the package to install
    prompt = prompt or "textgame"
    return Task(name=ENVIRONMENT.name, make_env=functools.partial(TextGameEnv, max_steps=max_steps),
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_steps=max_steps), oracle_plan=oracle_plan,
                score=textgame_score, config={"prompt": prompt, "max_steps": max_steps})


def build(settings, preset: dict | None = None):
    """Return the text-game Task (the prompt from ``settings``; a game allows 50 actions)."""
    return textgame_task(prompt=settings.prompt)


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """Return ``n`` (default registry.GENERATED_ROWS) generated games of the split's fold (train: train seeds;
    eval, heldout: dev seeds), or of the fold ``source`` names (train, dev, test); another ``source`` is a task-row
    JSONL file."""
    from agentrl.envs.textgame.env import FOLDS, textgame_tasks

    if source is None or source in FOLDS:
        from agentrl.envs.registry import GENERATED_ROWS

        return textgame_tasks(source or SPLIT_FOLDS[split], GENERATED_ROWS if n is None else n)
    from agentrl.core.config import data_file
    from agentrl.core.io import read_jsonl

    return read_jsonl(data_file(source), required=("id", "question", "metadata"))


def score(prediction, row, env) -> dict:
    """Return the game's metrics of the episode (agentrl.envs.textgame.env.textgame_score)."""
    from agentrl.envs.textgame.env import textgame_score

    return textgame_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="textgame", summary="household text games (TextWorldExpress, JVM) with an act tool", build=build,
    env_class="agentrl.envs.textgame.env:TextGameEnv", rows=rows, score=score, prompts=PROMPTS,
    rewards={"game_score": 1.0, "format": 0.1}, reward_metrics={"game_score": "score"},
    metrics=("score", "steps", "invalid_actions"), answer_scored=False, pooled=True, min_turns=20, demo_items=4,
    folder=__name__)
