"""DPO on the model's own attempts: TRL's DPOTrainer on preference pairs (``agentrl export --pairs``), training the
SFT LoRA adapter further against a frozen copy of it as the reference (TRL adds the copy as the ``ref`` adapter
when given a PEFT model with a trained adapter), so the policy moves away from SFT only as far as ``beta`` allows.
Pairs of the preset's held-out items are dropped (the gate, agentrl.core.heldout). The backend is chosen as for SFT
(Unsloth on CUDA, transformers + peft elsewhere). Output, under ``runs/dpo/<name>/``::

    adapter/           the trained LoRA adapter + tokenizer (the same shape as SFT's: evaluate it as any adapter)
    metrics.json       loss, reward margins and accuracies per logged step
    train_items.jsonl  the items of the pairs it trained on
    manifest.json      config, backend (and why), versions, counts
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from agentrl.core.chat import first_user_text
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_jsonl, write_json, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.tracking import trackers
from agentrl.train.configs import DPOSettings, record, trl_args
from agentrl.train.models import (
    base_model,
    bitsandbytes_fallback,
    cuda_available,
    cuda_precision,
    load_for_training,
    prepare_backend,
    progress_bars,
)
from agentrl.train.progress import attach_progress

log = logging.getLogger(__name__)

__all__ = ["DPOSettings", "run_dpo", "pairs_file", "load_pairs", "print_dpo_summary"]


def pairs_file(data: str | Path) -> Path:
    """Return the pairs file of ``data`` (a sample run directory or the file itself); a missing one is a DataError
    that says how to make it."""
    p = Path(data)
    path = p if p.suffix == ".jsonl" else p / "pairs" / "train.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: no preference pairs (run `agentrl sample` and `agentrl export --pairs {p}` first)")
    return path


def pair_rows(path: Path) -> list[dict]:
    """Return the pairs of ``path``, each checked: ``prompt`` / ``chosen`` / ``rejected`` lists of messages (a
    DataError naming the file and line otherwise, and for a file without any pair)."""
    rows = read_jsonl(path, required=("prompt", "chosen", "rejected"))
    if not rows:
        raise DataError(f"{path}: no preference pair")
    for i, r in enumerate(rows, start=1):
        for key in ("prompt", "chosen", "rejected"):
            value = r[key]
            if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m for m in value):
                raise DataError(f"{path}:{i}: '{key}' must be a list of messages ({{\"role\", \"content\"}}), got "
                                f"{type(value).__name__}")
        if not r["chosen"] or not r["rejected"]:
            raise DataError(f"{path}:{i}: 'chosen' and 'rejected' must each hold the assistant turn they compare")
    return rows


def load_pairs(rows: list[dict]):
    """Return the pairs as a ``datasets.Dataset`` (prompt / chosen / rejected messages, tools as a JSON string)."""
    from datasets import Dataset, Features, Json, List, Value

    features = Features({"prompt": List(Json()), "chosen": List(Json()), "rejected": List(Json()),
                         "tools": Value("string")})
    return Dataset.from_list([{k: r.get(k, "[]") for k in features} for r in rows], features=features)


def derived_args(settings: DPOSettings, out: Path) -> dict:
    """Return the DPOConfig fields agentrl derives: the output directory, the machine's precision (bf16/fp16 on CUDA
    as the card allows; on CPU, bf16 autocast where agentrl.core.cpu_precision measured it faster, else fp32)."""
    return {"output_dir": str(out / "trainer"), "use_cpu": not cuda_available(), **cuda_precision(settings.model),
            "disable_tqdm": not progress_bars(), "report_to": trackers(settings.report_to)}


def run_dpo(settings: DPOSettings, heldout: HeldOut, *, runs: str | Path = "runs", callbacks=(),
            source: dict | None = None) -> dict:
    """Train with DPO on the pairs of ``settings.data`` without the held-out items' (the gate); save the adapter,
    metrics and manifest under ``runs/dpo/<name>/``; return the metrics (loss and reward margin per logged step,
    backend, counts, seconds). The pairs and TRL's config are checked before the model loads."""
    settings = bitsandbytes_fallback(settings)
    path = pairs_file(settings.data)
    rows = heldout.drop(pair_rows(path), f"preference pairs of {path}")  # prompt, chosen and rejected all read
    out = Path(runs) / "dpo" / settings.name
    prepare_backend(settings.model)
    args = trl_args(settings, derived_args(settings, out))
    loaded = load_for_training(settings.model, adapter=settings.adapter, seed=settings.seed,
                               gradient_checkpointing=settings.gradient_checkpointing)
    from trl import DPOTrainer  # after the model: Unsloth patches trl when it loads

    dataset = load_pairs(rows)
    trainer = DPOTrainer(model=loaded.model, args=args, train_dataset=dataset, processing_class=loaded.tokenizer,
                         callbacks=list(callbacks))
    # a progress line / bar and loss chart instead of transformers' printed log dicts; the full log in out/log.jsonl
    attach_progress(trainer, f"DPO {settings.name}", out, shown=("loss", "rewards/margins"),
                    chart=("loss", "rewards/margins"))
    kept = len(trainer.train_dataset)
    if kept == 0:
        raise DataError(f"{path}: every pair's prompt is longer than dpo.max_length={settings.max_length}")
    start = time.perf_counter()
    trainer.train()
    seconds = round(time.perf_counter() - start, 1)
    keys = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
    history = [{"step": h["step"], **{k: h[k] for k in keys if k in h}} for h in trainer.state.log_history
               if "loss" in h]
    metrics = {"backend": loaded.backend, "backend_reason": loaded.reason, "steps": trainer.state.global_step,
               "train_seconds": seconds, "counts": {"pairs": len(dataset), "pairs_in_length": kept,
                                                    "heldout_dropped": heldout.dropped.get(
                                                        f"preference pairs of {path}", 0)},
               "history": history}
    if trainer.is_world_process_zero():
        adapter = out / "adapter"
        trainer.model.save_pretrained(str(adapter), selected_adapters=["default"])
        loaded.tokenizer.save_pretrained(str(adapter))
        (adapter / "base_model.txt").write_text(base_model(settings.model, settings.adapter) + "\n")
        write_json(out / "metrics.json", metrics)
        write_jsonl(out / "train_items.jsonl", [_pair_item(r) for r in rows])
        write_manifest(out, phase="dpo", config=record(settings), counts={**metrics["counts"],
                                                                          "steps": metrics["steps"]},
                       inputs={"pairs": path, "model": base_model(settings.model, settings.adapter),
                               "adapter": settings.adapter},
                       extra={"backend": loaded.backend, "backend_reason": loaded.reason,
                              "heldout": heldout.describe(), "preset": source or {}})
    return {**metrics, "out": out}


def _pair_item(pair: dict) -> dict:
    """Return the item a preference pair is about: its id and its question (the prompt's first user message)."""
    return {"id": pair.get("id"), "question": first_user_text(pair.get("prompt"))}


def print_dpo_summary(metrics: dict) -> None:
    """Print the DPO run: steps, backend, pairs, and the loss / reward margin of the first and last logged step."""
    h = metrics["history"]
    print(f"{metrics['out']}: {metrics['steps']} DPO steps on {metrics['backend']} ({metrics['backend_reason']}), "
          f"{metrics['train_seconds']} s; {metrics['counts']}")
    if h:
        first, last = h[0], h[-1]
        print(f"loss {first['loss']:.4f} (step {first['step']}) -> {last['loss']:.4f} (step {last['step']}); "
              f"reward margin {first.get('rewards/margins', 0):.4f} -> {last.get('rewards/margins', 0):.4f}")
