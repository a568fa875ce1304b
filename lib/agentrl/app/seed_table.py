"""The final table of a MultiHop-RAG run in the seed's format (model, top-k, chunk size, F1 / EM / acc), next to the
figures the seed (DeepSearch-RL) reported for Qwen3-4B-Instruct-2507 on validation-200."""

from __future__ import annotations

from pathlib import Path

from agentrl.core.io import DataError, read_json

# The seed's own figures (F1; its report gives no EM/acc for these rows): top-3 hybrid retrieval, 200-token chunks
SEED_ROWS = [
    ("seed: Qwen3-4B-Instruct-2507 (base prompt)", 3, 200, "0.435", "", ""),
    ("seed: Qwen3-4B-Instruct-2507 (NoThink prompt)", 3, 200, "0.521", "", ""),
    ("seed: + LoRA SFT (139-1,411 teacher trajectories)", 3, 200, "0.701-0.751", "", ""),
    ("seed: + LoRA SFT + GSPO", 3, 200, "0.863", "", ""),
]


def run_row(run_dir: str | Path, chunk_size: int | None) -> tuple:
    """Return ``(model, top_k, chunk size, f1, em, acc)`` of an evaluation run directory (its metrics.json and
    manifest.json)."""
    run = Path(run_dir)
    try:
        metrics, manifest = read_json(run / "metrics.json"), read_json(run / "manifest.json")
    except (OSError, ValueError) as exc:
        raise DataError(f"{run}: not an evaluation run ({exc})") from None
    config = manifest.get("config") or {}
    policy = config.get("policy") or {}
    model = policy.get("adapter") or policy.get("model") or policy.get("kind") or run.name
    top_k = (config.get("task") or {}).get("top_k") or (config.get("eval") or {}).get("top_k")
    overall = metrics["overall"]
    return (f"{run.name}: {model} (n={metrics['n']})", top_k, chunk_size,
            *(f"{overall[k]:.3f}" if k in overall else "" for k in ("f1", "em", "acc")))


def seed_table(runs: list[str], preset: dict | None = None) -> str:
    """Return a markdown table: one row per evaluation run (chunk size from the preset's ``[corpus]``), then the
    seed's rows."""
    chunk = ((preset or {}).get("corpus") or {}).get("chunk_size")
    rows = [run_row(r, chunk) for r in runs] + SEED_ROWS
    lines = ["| model | top-k | chunk size | F1 | EM | acc |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
