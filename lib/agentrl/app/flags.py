"""Command-line flags that set preset keys: each is a ``--set`` written another way, so it takes part in the one merge
of a preset's layers (agentrl.app.presets.load: file, card, ``--set``, then these flags) and is checked and reported
like any other value (``--max-steps: grpo.max_steps: expected int``).

``key_flag(parser, "--max-steps", key="grpo.max_steps", type=int)`` declares one; ``{env}`` in a key stands for the
run's environment (``--max-turns`` is ``eval.{env}.max_turns``); ``layers`` turns the flags a user typed into
preset layers (agentrl.app.commands.layers). ``--env-arg KEY=VALUE`` sets any setting of the run's environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentrl.core.io import DataError


def key_flag(parser, *names: str, key: str | tuple[str, ...], convert: Callable[[Any], Any] | None = None,
             clears: str | None = None, **kwargs) -> None:
    """Add a flag to ``parser`` that sets preset ``key`` (dotted; ``{env}``: the run's environment) to its value
    (``convert``-ed: a comma list, JSON, ...); ``clears``: another key it sets to "" (an explicit source replaces the
    preset's other one)."""
    action = parser.add_argument(*names, **kwargs)
    keys = dict(parser.get_default("_keys") or {})
    keys[action.dest] = (key, convert, clears, action.option_strings[0])
    parser.set_defaults(_keys=keys)


def comma_list(value: str) -> list[str]:
    """Return ``"a,b"`` as ``["a", "b"]``."""
    return [v.strip() for v in value.split(",") if v.strip()]


def json_value(value: str) -> Any:
    """Return ``value`` read as JSON (DataError when it is not)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise DataError(f"{value!r} is not valid JSON ({exc})") from None


def env_args(parser) -> None:
    """Add ``--env-arg KEY=VALUE`` (repeatable): any setting of the run's environment (``[eval.<env>] KEY``)."""
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the environment (its README: top_k, index, mcp_url, scoring, backend, ...), "
                             "TOML value syntax; repeatable; the same as --set eval.<env>.KEY=VALUE")
