"""Text-game environment: one tool, ``act(command)``, in a TextWorldExpress game (``twc``: put household objects
where they belong, ALFWorld-like; ``cookingworld`` and ``coin`` work the same way).

Sample task (built by :func:`textgame_tasks`; the game is regenerated from game, params, fold and seed)::

    {"id": "twc_dev_1",
     "question": "Your task is to pick up objects, then place them in their usual locations in the environment.\\n
                  You are in the bedroom. ... you see a checkered duvet. ... you see a clean gray blazer.",
     "golden_answers": ["done"],
     "metadata": {"game": "twc", "params": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
                  "fold": "dev", "seed": 1, "gold": ["look around", "take checkered duvet", ...]}}

Metrics of an episode:

- ``success``: 1 when the game reports the task solved (``tasksuccess``); ``em``/``f1``/``acc``/``precision``/
  ``recall`` repeat it so phase-02 statistics and curation work unchanged.
- ``score``: the game's score in [0, 1] (partial progress: each object put away counts).
- ``steps``: ``act`` calls that reached the game; ``invalid_actions``: commands the game did not list as valid.

Folds are kept apart: training rows come from ``train`` seeds, evaluation from ``dev``/``test`` seeds (the game
generator keeps the folds disjoint). Starting a JVM costs about half a second, so game instances live in a
per-process pool: an environment takes one on its first reset and gives it back when it is garbage-collected,
so each instance serves one episode at a time and concurrent episodes are safe.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import threading
import weakref

from agentrl.core.chat import Turn
from agentrl.core.io import DataError
from agentrl.envs.base import ToolError, row_metadata

DEFAULT_GAME = "twc"
DEFAULT_PARAMS = "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0"
FOLDS = ("train", "dev", "test")
STEP_LIMIT = 50
_MAX_LISTED = 30  # valid actions shown to the model after each step


class JavaMissingError(DataError):
    """Raised when no ``java`` executable is found (TextWorldExpress runs in a JVM). A DataError: the CLI prints
    ``error: ...`` with the install command and exits 2, as for a missing MariaDB."""


def require_java() -> None:
    """Raise JavaMissingError (naming the package to install) unless a ``java`` executable is on PATH."""
    if shutil.which("java") is None:
        raise JavaMissingError("the text-game environment needs Java 17+ (TextWorldExpress runs in a JVM) and "
                               "found no `java` on PATH; install it: `sudo apt-get install openjdk-17-jre-headless`")


class _Pool:
    """Idle game instances of this process; a game is held by one environment at a time. Every JVM the pool started
    is shut down when the process exits (:meth:`close`, registered with atexit)."""

    def __init__(self):
        self._idle: list = []
        self._started: list = []
        self._lock = threading.Lock()

    def take(self):
        """Return an idle game instance, starting a JVM only when none is idle."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        require_java()
        from textworld_express import TextWorldExpressEnv

        game = TextWorldExpressEnv(envStepLimit=STEP_LIMIT)
        game._agentrl_loaded = None
        with self._lock:
            if not self._started:
                atexit.register(self.close)
            self._started.append(game)
        return game

    def close(self) -> None:
        """Shut down every game's JVM gateway now, while the interpreter still runs threads: left to the games'
        ``__del__`` at interpreter shutdown, py4j's callback server joins a thread that never ends on Python 3.13,
        and the process hangs after its work is done (a command that opened a text game never exits)."""
        with self._lock:
            started, self._started, self._idle = self._started, [], []
        for game in started:
            with contextlib.suppress(Exception):  # a JVM that is already gone
                game.close()
            game.close = lambda: None  # its __del__ at shutdown: nothing left to shut

    def give_back(self, game) -> None:
        """Return ``game`` to the idle list."""
        with self._lock:
            self._idle.append(game)

    def size(self) -> int:
        """Return the number of idle instances."""
        with self._lock:
            return len(self._idle)


POOL = _Pool()


def _start(game, name: str, params: str, fold: str, seed: int, gold: bool):
    """Load (when different) and reset ``game``; return ``(observation, infos)``."""
    if fold not in FOLDS:
        raise DataError(f"text game fold must be one of {', '.join(FOLDS)}, got '{fold}'")
    if game._agentrl_loaded != (name, params):
        game.load(gameName=name, gameParams=params)
        game._agentrl_loaded = (name, params)
    return game.reset(seed=int(seed), gameFold=fold, generateGoldPath=gold)


def _format(obs: str, infos: dict) -> str:
    """Return what the model reads after an action: observation, score and (some of) the valid actions."""
    actions = sorted(a for a in infos.get("validActions") or [] if a not in ("look around", "inventory"))
    listed = ", ".join(actions[:_MAX_LISTED]) + (" ..." if len(actions) > _MAX_LISTED else "")
    state = "solved" if infos.get("tasksuccess") else ("failed" if infos.get("taskfailure") else "in progress")
    return (f"{obs.strip()}\nScore: {float(infos.get('score') or 0):.2f} ({state}). "
            f"Valid actions include: look around, inventory, {listed}")


class TextGameEnv:
    """A TextWorldExpress game per episode with one tool; reset with a text-game task row."""

    def __init__(self, max_steps: int = STEP_LIMIT):
        self._max_steps = max_steps
        self._game = None
        self._infos: dict = {}
        self.steps = self.invalid = 0

    def reset(self, **row) -> None:
        """Start an episode: regenerate the row's game (game, params, fold, seed from its metadata)."""
        meta = row_metadata(row)
        self.steps = self.invalid = 0
        self._infos = {}
        if not meta or "seed" not in meta:
            return
        if self._game is None:
            self._game = POOL.take()
            weakref.finalize(self, POOL.give_back, self._game)
        _, self._infos = _start(self._game, meta.get("game", DEFAULT_GAME), meta.get("params", DEFAULT_PARAMS),
                                meta.get("fold", "dev"), meta["seed"], gold=False)

    def act(self, command: str) -> str:
        """Perform one action in the text game and return what happens, the score and the valid actions.

        Args:
            command: One action, for example "open wardrobe" or "put clean gray blazer in wardrobe".
        """
        if self._game is None or not self._infos:
            raise RuntimeError("no game: reset the environment with a text-game task row first")
        if self._infos.get("tasksuccess") or self._infos.get("done"):
            raise ToolError("The game is over. Give your final answer now: <answer>done</answer>.")
        if self.steps >= self._max_steps:
            raise ToolError(f"Step limit reached ({self._max_steps} actions). Give your final answer now.")
        command = " ".join(str(command).split())  # case kept: the game knows "T-shirt", not "t-shirt"
        if command not in (self._infos.get("validActions") or ()):
            self.invalid += 1
        self.steps += 1
        obs, _, _, infos = self._game.step(command)
        self._infos = infos
        return _format(obs, infos)

    def _score(self) -> dict[str, float]:
        success = float(bool(self._infos.get("tasksuccess")))
        return {"success": success, "score": float(self._infos.get("score") or 0.0), "steps": float(self.steps),
                "invalid_actions": float(self.invalid), "em": success, "f1": success, "acc": success,
                "precision": success, "recall": success}


def textgame_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the text-game metrics of the episode ``env`` just ran (zeros when it never started). A function,
    not a method: TRL exposes public methods as tools."""
    if env is None:
        return dict.fromkeys(("success", "score", "steps", "invalid_actions", "em", "f1", "acc", "precision",
                              "recall"), 0.0)
    return env._score()


def textgame_tasks(fold: str = "dev", n: int = 20, *, game: str = DEFAULT_GAME, params: str = DEFAULT_PARAMS,
                   first_seed: int = 0) -> list[dict]:
    """Return ``n`` task rows of ``fold`` (seeds ``first_seed``..), each with its opening text and gold path."""
    g = POOL.take()
    try:
        rows = []
        for seed in range(first_seed, first_seed + n):
            obs, infos = _start(g, game, params, fold, seed, gold=True)
            rows.append({"id": f"{game}_{fold}_{seed}",
                         "question": f"{infos['taskDescription'].strip()}\n{obs.strip()}",
                         "golden_answers": ["done"],
                         "metadata": {"game": game, "params": params, "fold": fold, "seed": seed,
                                      "gold": list(g.getGoldActionSequence())}})
        return rows
    finally:
        POOL.give_back(g)


def oracle_plan(row: dict) -> list:
    """The oracle's turns for a text game: one ``act`` per gold action, then ``<answer>done</answer>``."""
    gold = (row.get("metadata") or {}).get("gold") or []
    turns = [Turn(tool_calls=[{"id": f"call_{i}", "name": "act", "arguments": json.dumps({"command": a})}])
             for i, a in enumerate(gold)]
    return turns + [Turn(content="<answer>done</answer>", finish_reason="stop")]
