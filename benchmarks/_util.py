"""Helpers shared by the benchmark scripts (imported as ``from _util import ...``: scripts run from this folder)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """Return user+system CPU seconds of a process and its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def preset_index(config: str = "demo", runs: str | Path | None = None, progress: bool = True) -> Path:
    """Return the index directory of preset ``config``'s corpus (its ``[corpus]`` and ``[index]``) under ``runs``
    (default the repository's ``runs/``), building the corpus and index when they are missing."""
    from agentrl.app.presets import load
    from agentrl.data.pipeline import corpus_and_index

    preset = load(config)
    runs = Path(runs) if runs is not None else Path(__file__).resolve().parents[1] / "runs"
    return corpus_and_index(preset.settings("corpus"), preset.settings("index"), runs=runs,
                            progress=progress).index_dir
