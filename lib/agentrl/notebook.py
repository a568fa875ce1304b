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
    """Return the notebook's command-line arguments (``python nb.py -- --name x``), or {} where there are none."""
    try:
        import marimo as mo

        return dict(mo.cli_args())
    except Exception:  # Jupyter / exported scripts: no marimo context
        return {}


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
    """Change into the repository root (where configs/ and data/ live) when it exists; return the cwd."""
    if (REPO_ROOT / "configs").is_dir() and Path.cwd() != REPO_ROOT:
        os.chdir(REPO_ROOT)
    return Path.cwd()


def arg(args: dict, name: str, default):
    """Return ``args[name]`` converted to the type of ``default`` (marimo passes numbers already converted)."""
    value = args.get(name, default)
    if value is None or default is None or isinstance(value, type(default)):
        return value
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes")
    return type(default)(value)
