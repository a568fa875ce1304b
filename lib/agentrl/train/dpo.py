"""DPO on the model's own attempts: TRL's DPOTrainer on preference pairs (``agentrl export --pairs``), training the
SFT LoRA adapter further against a frozen copy of it as the reference (TRL adds the copy as the ``ref`` adapter
when given a PEFT model with a trained adapter), so the policy moves away from SFT only as far as ``beta`` allows.
The backend is chosen as for SFT (Unsloth on CUDA, transformers + peft elsewhere). Output, under
``runs/dpo/<name>/``::

    adapter/        the trained LoRA adapter + tokenizer (the same shape as SFT's: evaluate it as any adapter)
    metrics.json    loss, reward margins and accuracies per logged step
    manifest.json   config, backend (and why), versions, counts
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.io import DataError
from agentrl.train.models import ModelConfig

log = logging.getLogger(__name__)


@dataclass
class DPOSettings:
    """The ``[dpo]`` table of a preset. ``model`` defaults to ``[sft].model``."""

    name: str = "dpo"
    data: str = "runs/sample/sample"  # a sample run (pairs/train.jsonl inside) or a pairs .jsonl
    adapter: str | None = "runs/sft/sft/adapter"  # the SFT adapter trained further (None = a fresh LoRA)
    model: ModelConfig = field(default_factory=ModelConfig)
    beta: float = 0.1
    loss_type: str = "sigmoid"
    learning_rate: float = 5e-6
    optim: str = "adamw_torch"  # GPU presets: adamw_8bit (bitsandbytes)
    lr_scheduler: str = "constant"
    warmup: float = 0.0
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 2048
    logging_steps: int = 1
    report_to: list[str] = field(default_factory=list)
    seed: int = 42


def dpo_config(preset: dict | None = None, **overrides) -> DPOSettings:
    """Return the preset's ``[dpo]`` settings (its model table defaulting to ``[sft].model``) with the non-None
    ``overrides``."""
    from dataclasses import replace

    from agentrl.core.config import from_dict

    preset = preset or {}
    table = dict(preset.get("dpo") or {})
    if "model" not in table and (preset.get("sft") or {}).get("model"):
        table["model"] = preset["sft"]["model"]
    cfg = from_dict(DPOSettings, table, "dpo")
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def pairs_file(data: str | Path) -> Path:
    """Return the pairs file of ``data`` (a sample run directory or the file itself); a missing one is a DataError
    that says how to make it."""
    p = Path(data)
    path = p if p.suffix == ".jsonl" else p / "pairs" / "train.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: no preference pairs (run `agentrl sample` and `agentrl export --pairs {p}` first)")
    return path


def load_pairs(path: Path):
    """Return the pairs as a ``datasets.Dataset`` (prompt / chosen / rejected messages, tools as a JSON string)."""
    from datasets import Dataset, Features, Json, List, Value

    from agentrl.core.io import read_jsonl

    rows = read_jsonl(path, required=("prompt", "chosen", "rejected"))
    if not rows:
        raise DataError(f"{path}: no preference pair")
    features = Features({"prompt": List(Json()), "chosen": List(Json()), "rejected": List(Json()),
                         "tools": Value("string")})
    return Dataset.from_list([{k: r.get(k, "[]") for k in features} for r in rows], features=features)


def training_args(settings: DPOSettings, out: Path):
    """Return the DPOConfig of a run (bf16/fp16 on CUDA as the card allows; on CPU, bf16 autocast where
    agentrl.core.cpu_precision measured it faster, else fp32)."""
    from trl import DPOConfig

    from agentrl.train.models import cuda_available, cuda_precision, progress_bars

    return DPOConfig(
        output_dir=str(out / "trainer"), beta=settings.beta, loss_type=[settings.loss_type],
        learning_rate=settings.learning_rate, optim=settings.optim, lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup,
        num_train_epochs=settings.epochs, max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size, gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length, logging_steps=settings.logging_steps, logging_first_step=True,
        report_to=settings.report_to, seed=settings.seed, use_cpu=not cuda_available(),
        **cuda_precision(settings.model), disable_tqdm=not progress_bars(), save_strategy="no", dataset_num_proc=None,
    )


def run_dpo(settings: DPOSettings, *, runs: str | Path = "runs", callbacks=()) -> dict:
    """Train with DPO on the pairs of ``settings.data``; save the adapter, metrics and manifest under
    ``runs/dpo/<name>/``; return the metrics (loss and reward margin per logged step, backend, counts, seconds)."""
    from agentrl.core.config import to_dict
    from agentrl.core.io import write_json
    from agentrl.core.manifest import write_manifest
    from agentrl.train.models import bitsandbytes_fallback, load_for_training

    settings = bitsandbytes_fallback(settings)
    path = pairs_file(settings.data)
    out = Path(runs) / "dpo" / settings.name
    loaded = load_for_training(settings.model, adapter=settings.adapter, seed=settings.seed)
    from trl import DPOTrainer  # after the model: Unsloth patches trl when it loads

    dataset = load_pairs(path)
    trainer = DPOTrainer(model=loaded.model, args=training_args(settings, out), train_dataset=dataset,
                         processing_class=loaded.tokenizer, callbacks=list(callbacks))
    from agentrl.train.progress import attach_progress

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
               "train_seconds": seconds, "counts": {"pairs": len(dataset), "pairs_in_length": kept},
               "history": history}
    if trainer.is_world_process_zero():
        adapter = out / "adapter"
        trainer.model.save_pretrained(str(adapter), selected_adapters=["default"])
        loaded.tokenizer.save_pretrained(str(adapter))
        (adapter / "base_model.txt").write_text(settings.model.name + "\n")
        write_json(out / "metrics.json", metrics)
        write_manifest(out, phase="dpo", config=to_dict(settings), counts={**metrics["counts"],
                                                                          "steps": metrics["steps"]},
                       inputs={"pairs": path, "model": settings.model.name, "adapter": settings.adapter},
                       extra={"backend": loaded.backend, "backend_reason": loaded.reason})
    return {**metrics, "out": out}


def print_dpo_summary(metrics: dict) -> None:
    """Print the DPO run: steps, backend, pairs, and the loss / reward margin of the first and last logged step."""
    h = metrics["history"]
    print(f"{metrics['out']}: {metrics['steps']} DPO steps on {metrics['backend']} ({metrics['backend_reason']}), "
          f"{metrics['train_seconds']} s; {metrics['counts']}")
    if h:
        first, last = h[0], h[-1]
        print(f"loss {first['loss']:.4f} (step {first['step']}) -> {last['loss']:.4f} (step {last['step']}); "
              f"reward margin {first.get('rewards/margins', 0):.4f} -> {last.get('rewards/margins', 0):.4f}")
