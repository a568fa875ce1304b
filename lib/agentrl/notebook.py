"""Helpers the phase notebooks share, so the notebooks stay thin and the rules live in one tested place.

A notebook runs in four places: ``marimo edit`` (interactive), ``marimo run``, ``python notebooks/x.py``
(script) and as an exported ipynb in Jupyter/Colab, where ``mo.cli_args()`` raises and
``mo.app_meta().mode`` is None. Expensive cells are gated by a run button only where a person can press it.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.config import REPO_ROOT


def cli_args() -> dict:
    """Return the notebook's arguments: ``python nb.py -- --name x`` under marimo; in Jupyter (no command line)
    the ``AGENTRL_NB_ARGS`` environment variable (same ``--key value`` syntax); else {}."""
    try:
        import marimo as mo

        args = dict(mo.cli_args())
    except Exception:  # Jupyter / exported scripts: no marimo context
        args = {}
    return args or parse_args(os.environ.get("AGENTRL_NB_ARGS", ""))


def parse_args(text: str) -> dict:
    """Return ``{"key": value}`` from ``--key value`` pairs (numbers converted, dashes in keys become underscores)."""
    import shlex

    out, tokens = {}, shlex.split(text)
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            value = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("--") else "true"
            for cast in (int, float):
                try:
                    value = cast(value)
                    break
                except ValueError:
                    continue
            out[tok[2:].replace("-", "_")] = value
    return out


def interactive() -> bool:
    """Return True in ``marimo edit`` / ``marimo run``, where a person presses buttons."""
    try:
        import marimo as mo

        return mo.app_meta().mode in ("edit", "run")
    except Exception:
        return False


def should_run(button) -> bool:
    """Return True when a gated cell should run: its button was pressed, or nobody is there to press it."""
    return not interactive() or bool(getattr(button, "value", False))


def use_repo_root() -> Path:
    """Change into the working directory (``AGENTRL_WORKDIR``, else the repository root, where configs/ and
    data/ live) and return it."""
    target = Path(os.environ.get("AGENTRL_WORKDIR") or REPO_ROOT)
    if (target / "configs").is_dir() and Path.cwd() != target:
        os.chdir(target)
    return Path.cwd()


def arg(args: dict, name: str, default):
    """Return ``args[name]`` converted to the type of ``default`` (marimo passes numbers already converted)."""
    value = args.get(name, default)
    if value is None or default is None or isinstance(value, type(default)):
        return value
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes")
    return type(default)(value)
